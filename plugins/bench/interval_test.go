package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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

func TestRatioInterval(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	// swings is a machine whose speed changes from round to round far
	// more than the gap between the subjects.
	swings := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = ms(5 + float64(i*37%50))
		}
		return d
	}
	scaled := func(d []time.Duration, f float64) []time.Duration {
		out := make([]time.Duration, len(d))
		for i, x := range d {
			out[i] = time.Duration(f * float64(x))
		}
		return out
	}
	// noisy alternates ±10% around a steady time, out of step with the
	// other subject's noise.
	noisy := func(n int, base float64, phase int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = ms(base * (1 + 0.1*math.Sin(float64(i*7+phase))))
		}
		return d
	}
	tests := []struct {
		name     string
		num, den []time.Duration
		lo, hi   float64 // the interval must lie within [lo, hi]
		holds    float64 // and hold this ratio; 0 for none
		excludes float64 // and not hold this one; 0 for none
	}{
		// Resampling whole rounds keeps each round's pair together: a
		// ratio that holds in every round holds in every resample.
		{"paired rounds, swinging machine", scaled(swings(200), 1.5), swings(200), 1.5, 1.5, 1.5, 0},
		{"same subject", swings(200), swings(200), 1, 1, 1, 0},
		{"clearly slower", noisy(200, 20, 0), noisy(200, 10, 3), 1.9, 2.1, 2, 1.5},
		{"close to the target", noisy(200, 15, 0), noisy(200, 10, 3), 1.4, 1.6, 1.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := ratioInterval(tt.num, tt.den)
			if lo > hi || lo < tt.lo-1e-9 || hi > tt.hi+1e-9 {
				t.Errorf("interval %.4f-%.4f, want within %.2f-%.2f", lo, hi, tt.lo, tt.hi)
			}
			if tt.holds != 0 && (lo > tt.holds+1e-9 || hi < tt.holds-1e-9) {
				t.Errorf("interval %.4f-%.4f does not hold %.2f", lo, hi, tt.holds)
			}
			if tt.excludes != 0 && lo <= tt.excludes && tt.excludes <= hi {
				t.Errorf("interval %.4f-%.4f holds %.2f", lo, hi, tt.excludes)
			}
			if lo2, hi2 := ratioInterval(tt.num, tt.den); lo2 != lo || hi2 != hi {
				t.Errorf("second call gave %.4f-%.4f, first %.4f-%.4f: not reproducible", lo2, hi2, lo, hi)
			}
		})
	}
	if lo, hi := ratioInterval(nil, nil); lo != 0 || hi != 0 {
		t.Errorf("no rounds: %v-%v, want 0-0", lo, hi)
	}
}
