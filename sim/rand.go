package sim

import (
	"hash/fnv"
	"math/rand/v2"
)

// Stream returns the random source of one named stream of a seeded run. Every subsystem draws
// from its own stream ("lengths", "routing", ...), so adding draws to one leaves the others, and
// every policy compared in a run, unchanged. There is no global random source in the simulator.
func Stream(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}
