package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// warmUp rounds of every subject run untimed first: they fault the
// binaries into the page cache, create the state files and open the
// connections.
const warmUp = 5

// subject is one row of the Allocate table before it is measured.
type subject struct {
	name  string
	store string // "local" or "kube"; "" for the floor
	level string // levelInstance or levelConfiguration; "" for the floor
	run   func(context.Context) (sample, error)
}

// result is a subject with its samples.
type result struct {
	subject
	samples []sample
}

// measure runs warm-up rounds, then n rounds, each of every subject in
// turn, so that a machine that slows down or speeds up during the run
// shifts every row alike instead of biasing the ratios.
func (b *bench) measure(ctx context.Context, subjects []subject, n int) ([]result, error) {
	results := make([]result, len(subjects))
	for j, s := range subjects {
		results[j].subject = s
	}
	start := time.Now()
	for i := -warmUp; i < n; i++ {
		if i >= 0 && i%100 == 0 {
			b.progress("Allocate round %d of %d (%v so far)", i, n, time.Since(start).Round(time.Second))
		}
		for j, s := range subjects {
			x, err := s.run(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", s.name, i, err)
			}
			if i >= 0 {
				results[j].samples = append(results[j].samples, x)
			}
		}
	}
	return results, nil
}

// stats are a result's figures.
type stats struct {
	p50, p99                time.Duration // Allocate call to response
	prop50, prop99, propMax time.Duration // response to the last update
	early                   int           // updates all before the response
	writesMean              float64
	writesMin, writesMax, n int
	fromCall50, fromCallMax time.Duration // call to the last update
}

func (r result) stats() stats {
	var took, prop, fromCall []time.Duration
	s := stats{n: len(r.samples), writesMin: -1}
	for _, x := range r.samples {
		took, prop, fromCall = append(took, x.took), append(prop, x.prop), append(fromCall, x.took+x.prop)
		if x.prop < 0 {
			s.early++
		}
		s.writesMean += float64(x.writes) / float64(len(r.samples))
		s.writesMax = max(s.writesMax, x.writes)
		if s.writesMin < 0 || x.writes < s.writesMin {
			s.writesMin = x.writes
		}
	}
	s.p50, s.p99 = percentile(took, 50), percentile(took, 99)
	s.prop50, s.prop99, s.propMax = percentile(prop, 50), percentile(prop, 99), percentile(prop, 100)
	s.fromCall50, s.fromCallMax = percentile(fromCall, 50), percentile(fromCall, 100)
	return s
}

// percentile of d, p in [0, 100], nearest rank; d is sorted in place.
func percentile[T cmp.Ordered](d []T, p int) T {
	var zero T
	if len(d) == 0 {
		return zero
	}
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}
