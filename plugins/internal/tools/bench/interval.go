package main

import (
	"math/rand/v2"
	"slices"
	"time"
)

// A single run's ratio of medians moves from run to run. The interval
// says how far this run's ratio could be from what the same run would
// give with more rounds. What changes between runs (the machine's load
// and memory state) it cannot see.

// resamples is how many bootstrap resamples an interval is built from.
const resamples = 2000

// ratioInterval is the 95% bootstrap interval of median(num)/median(den).
// num[i] and den[i] must come from the same round: rounds are resampled
// whole, which keeps what interleaving gives (a slow moment of the
// machine weighs on both subjects of its round). The seed is fixed, so
// the same samples give the same interval.
func ratioInterval(num, den []time.Duration) (lo, hi float64) {
	n := min(len(num), len(den))
	if n == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	a, b := make([]time.Duration, n), make([]time.Duration, n)
	ratios := make([]float64, resamples)
	for r := range ratios {
		for i := range n {
			k := rng.IntN(n)
			a[i], b[i] = num[k], den[k]
		}
		ratios[r] = float64(percentile(a, 50)) / float64(percentile(b, 50))
	}
	slices.Sort(ratios)
	return ratios[resamples*25/1000], ratios[resamples*975/1000-1]
}
