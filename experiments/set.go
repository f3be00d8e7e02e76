package experiments

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var segmentRE = regexp.MustCompile(`^([A-Za-z0-9_]+)(?:\[(\d+)\])?$`)

// Set overrides one key of the experiment, as `--set key=value` does on the command line:
// "seed=3", "cluster.workers=4", "model[0].arch=llama-3-8b", "workload.input_tokens.value=256".
// The value is parsed according to the key's type. Overrides are applied before Resolve.
func (e *Experiment) Set(assignment string) error {
	key, value, ok := strings.Cut(assignment, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want key=value", assignment)
	}
	e.durationApplied = false // the queries follow the duration again, at the new rate
	v := reflect.ValueOf(e).Elem()
	prevSeg := ""
	for _, seg := range strings.Split(key, ".") {
		m := segmentRE.FindStringSubmatch(seg)
		if m == nil {
			return fmt.Errorf("--set %s: malformed key segment %q", key, seg)
		}
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		if v.Kind() == reflect.Slice {
			return fmt.Errorf("--set %s: %q is a list: name an element, e.g. %s[0]", key, prevSeg, prevSeg)
		}
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("--set %s: %q is not a table", key, seg)
		}
		f, found := fieldByTag(v, m[1])
		if !found {
			return fmt.Errorf("--set %s: unknown key %q", key, m[1])
		}
		v = f
		if m[2] != "" {
			if v.Kind() != reflect.Slice {
				return fmt.Errorf("--set %s: %q is not a list", key, m[1])
			}
			i, _ := strconv.Atoi(m[2])
			if i >= v.Len() {
				return fmt.Errorf("--set %s: index %d out of range (the file has %d)", key, i, v.Len())
			}
			v = v.Index(i)
		}
		prevSeg = m[1]
	}
	if v.Kind() == reflect.Slice {
		return fmt.Errorf("--set %s: %q is a list: name an element, e.g. %s[0]", key, prevSeg, prevSeg)
	}
	if err := setScalar(v, strings.TrimSpace(value)); err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	if e.overrides == nil {
		e.overrides = map[string]bool{}
	}
	e.overrides[key] = true
	return nil
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]
		if tag != "" && strings.EqualFold(tag, name) {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

var durationType = reflect.TypeOf(time.Duration(0))

func setScalar(v reflect.Value, s string) error {
	if v.Kind() == reflect.Pointer {
		nv := reflect.New(v.Type().Elem())
		if err := setScalar(nv.Elem(), s); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	}
	if v.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration such as 10s, got %q", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.Trim(s, `"`))
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(n)
	case reflect.Uint64, reflect.Uint, reflect.Uint32:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want a non-negative integer, got %q", s)
		}
		v.SetUint(n)
	case reflect.Float64, reflect.Float32:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	default:
		return fmt.Errorf("cannot set a %s from the command line; edit the file", v.Kind())
	}
	return nil
}
