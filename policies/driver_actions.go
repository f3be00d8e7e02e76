package policies

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Action checks: a policy's actions are carried out only when they keep the pipeline's
// invariants (a call runs once, on a worker that holds its model; a worker holds only what fits).

// apply checks and carries out actions.
func (d *Driver) apply(acts []Action) error {
	for _, a := range acts {
		if err := d.do(a); err != nil {
			return fmt.Errorf("policy %s at %v: %s: %w", d.policy.Name(), d.backend.Now(), a, err)
		}
	}
	return nil
}

func (d *Driver) do(a Action) error {
	if a.Kind == ActWake {
		if a.At < 0 {
			return errors.New("a wake-up time must not be negative")
		}
		d.addTimer(timer{at: a.At, kind: timerPolicy})
		return nil
	}
	if a.Kind == ActCancel {
		if err := d.lookup(a.CallID); err != nil {
			return err
		}
		switch st := d.cs(a.CallID).status; st {
		case callWaiting, callReady, callSubmitted, callTool:
		default:
			return fmt.Errorf("the call is %s", st)
		}
		fx := d.effects()
		now := d.backend.Now()
		d.cancel(a.CallID, now, &fx)
		d.derived = d.flush(&fx, d.derived, now)
		return d.fatal
	}
	if a.Worker < 0 || int(a.Worker) >= d.workers {
		return fmt.Errorf("no worker %d (the cluster has %d)", a.Worker, d.workers)
	}
	ws := &d.ws[a.Worker]
	switch a.Kind {
	case ActLoad:
		if _, ok := d.byName.Get(a.Model); !ok {
			return fmt.Errorf("unknown model %q", a.Model)
		}
		if d.holds(a.Worker, a.Model) {
			return errors.New("the worker already holds it")
		}
		if _, ok := ws.loading[a.Model]; ok {
			return errors.New("the worker is already loading it")
		}
		if !d.Fits(a.Worker, a.Model) {
			return fmt.Errorf("it does not fit next to %v (memory fractions sum above 1)", d.resident(a.Worker))
		}
		// The start is read before the backend is asked: a real backend's load may complete
		// (and stamp its end) on another goroutine before Load returns.
		start := d.backend.Now()
		if err := d.backend.Load(a.Worker, a.Model); err != nil {
			return err
		}
		ws.loading[a.Model] = start
	case ActUnload:
		if !d.holds(a.Worker, a.Model) {
			return errors.New("the worker does not hold it")
		}
		if n := ws.inflight[d.modelIndex(a.Model)]; n > 0 {
			return fmt.Errorf("%d of its calls are in flight there", n)
		}
		start := d.backend.Now() // before the backend is asked, as for a load
		if err := d.backend.Unload(a.Worker, a.Model); err != nil {
			return err
		}
		for i, m := range ws.holds {
			if m == a.Model {
				ws.holds = append(ws.holds[:i:i], ws.holds[i+1:]...)
				break
			}
		}
		ws.unloading[a.Model] = start
	case ActSubmit:
		if err := d.lookup(a.CallID); err != nil {
			return err
		}
		cs := d.cs(a.CallID)
		if cs.status != callReady {
			return fmt.Errorf("the call is %s, not ready", cs.status)
		}
		if !d.holds(a.Worker, cs.call.Model) {
			return fmt.Errorf("the worker does not hold %s", cs.call.Model)
		}
		if cs.open {
			cp := *cs.call
			cp.InputTokens = d.prompt(a.CallID)
			if err := d.grower.SubmitOpen(a.Worker, &cp, a.Priority); err != nil {
				return err
			}
			cs.sent = int32(cp.InputTokens)
		} else if err := d.backend.Submit(a.Worker, cs.call, a.Priority); err != nil {
			return err
		}
		cs.status = callSubmitted
		cs.worker = a.Worker
		ws.inflight[cs.model]++
		d.submitted(a.Worker, a.CallID, d.backend.Now())
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
	return nil
}

// lookup checks that id names a call of the window: one that has left it (see retire) has
// finished.
func (d *Driver) lookup(id int) error {
	switch {
	case d.calls.holds(id):
		return nil
	case id >= 0 && id < d.calls.lo:
		return errors.New("the call has finished")
	}
	return errors.New("no such call")
}

func (d *Driver) holds(w WorkerID, model string) bool {
	return slices.Contains(d.ws[w].holds, model)
}

func (d *Driver) resident(w WorkerID) []string {
	ws := &d.ws[w]
	out := append([]string(nil), ws.holds...)
	for m := range ws.loading {
		out = append(out, m)
	}
	for m := range ws.unloading {
		out = append(out, m)
	}
	sort.Strings(out[len(ws.holds):])
	return out
}
