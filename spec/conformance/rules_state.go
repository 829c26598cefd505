package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// checkIdempotent: an ADD repeated for the same request-id, with the same
// request (its items in any order), returns the same result and
// allocates nothing more.
func checkIdempotent(ctx context.Context, s *subject) error {
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	request := rs + ":1"
	if other := s.secondSpec(rs); other != "" {
		request = rs + ":1," + other + ":1"
	}
	id := s.requestID(1)
	_, first, err := s.add(ctx, request, id)
	if err != nil {
		return err
	}
	_, again, err := s.add(ctx, reversed(request), id)
	if err != nil {
		return err
	}
	if !sameJSON(first.stdout, again.stdout) {
		return again.problem("the repeated ADD answered %s, the first %s", quote(again.stdout), quote(first.stdout))
	}
	if !s.facts.is010() {
		return nil
	}
	ids, err := s.listIDs(ctx)
	if n := countOf(ids, id); err == nil && n != 1 {
		err = fmt.Errorf("LIST shows request-id %s %d times after a repeated ADD, want once: %v", id, n, ids)
	}
	return err
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// secondSpec returns a resource-spec other than rs with a free unit, or "".
func (s *subject) secondSpec(rs string) string {
	free := s.facts.free()
	for _, other := range s.facts.specs() {
		if other != rs && free[other] > 0 {
			return other
		}
	}
	return ""
}

// reversed writes a request's items in the opposite order.
func reversed(request string) string {
	items := strings.Split(request, ",")
	slices.Reverse(items)
	return strings.Join(items, ",")
}

// checkConflict: an ADD for a request-id that holds an allocation made
// with a different request is code 11 and leaves that allocation alone.
func checkConflict(ctx context.Context, s *subject) error {
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	id := s.requestID(1)
	res, first, err := s.add(ctx, rs+":1", id)
	if err != nil {
		return err
	}
	add := []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST_ID=" + id}
	cases := []errorCase{{vars: append(add, "CDI_REQUEST="+rs+":2"), code: spec.CodeRequestConflict}}
	if s.facts.is010() && len(res.Units) > 0 {
		pinned := append(add, "CDI_REQUEST="+rs+":1", "CDI_REQUEST_DEVICES="+res.Units[0].Device)
		cases = append(cases, errorCase{vars: pinned, code: spec.CodeRequestConflict})
	}
	if err := s.wantErrors(ctx, cases); err != nil {
		return err
	}
	_, again, err := s.add(ctx, rs+":1", id)
	if err == nil && !sameJSON(first.stdout, again.stdout) {
		err = again.problem("after a conflicting ADD the allocation changed: %s, was %s", quote(again.stdout), quote(first.stdout))
	}
	return err
}

// checkAllOrNothing: a request that cannot be met in its entirety is
// code 10 and takes nothing, across all its resource-specs: LIST is
// unchanged and every free unit can still be allocated.
func checkAllOrNothing(ctx context.Context, s *subject) error {
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	n := s.facts.perRequest(rs)
	requests := [][]string{{fmt.Sprintf("CDI_REQUEST=%s:%d", rs, n+1)}}
	if other := s.servedOther(rs); other != "" {
		requests = append(requests, []string{fmt.Sprintf("CDI_REQUEST=%s:1,%s:%d", rs, other, s.facts.perRequest(other)+1)})
	}
	if d := s.freeDevice(rs); d != nil {
		// One request takes one slot per device: two on one device never fit.
		requests = append(requests, []string{"CDI_REQUEST=" + rs + ":2", "CDI_REQUEST_DEVICES=" + d.ID})
	}
	var errs []error
	for i, vars := range requests {
		errs = append(errs, s.takesNothing(ctx, append([]string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST_ID=" + s.requestID(i)}, vars...)))
	}
	// Nothing was kept: every free unit is still there.
	_, _, err = s.add(ctx, fmt.Sprintf("%s:%d", rs, n), s.requestID(len(requests)))
	return errors.Join(append(errs, err)...)
}

// takesNothing checks that an ADD fails with code 10 and, in 0.1.0, that
// LIST is the same after it as before.
func (s *subject) takesNothing(ctx context.Context, vars []string) error {
	var before *spec.ListResult
	if s.facts.is010() {
		var err error
		if before, err = s.list(ctx); err != nil {
			return err
		}
	}
	r := s.call(ctx, vars...)
	if err := wantError(r, spec.CodeInsufficientResources); err != nil {
		return err
	}
	if before == nil {
		return nil
	}
	after, err := s.list(ctx)
	if err == nil && !sameJSON(mustJSON(before), mustJSON(after)) {
		err = r.problem("failed, yet LIST changed: %s, was %s", quote(mustJSON(after.Allocations)), quote(mustJSON(before.Allocations)))
	}
	return err
}

// servedOther returns a resource-spec other than rs that INFO counts
// units of, so that the plugin certainly serves it, or "".
func (s *subject) servedOther(rs string) string {
	for _, other := range s.facts.specs() {
		if other != rs && s.facts.counts()[other] > 0 {
			return other
		}
	}
	return ""
}

// freeDevice returns the inventory's healthy device of rs with the most
// free slots, or nil (and always nil before 0.1.0).
func (s *subject) freeDevice(rs string) *spec.DeviceInfo {
	var best *spec.DeviceInfo
	devices := s.facts.devices()
	for i, d := range devices {
		if d.Resource == rs && d.Healthy && d.Capacity > d.Used && (best == nil || d.Capacity-d.Used > best.Capacity-best.Used) {
			best = &devices[i]
		}
	}
	return best
}

// checkDel: DEL always exits 0: for a request-id that holds nothing, a
// malformed or a missing one, and twice in a row. A DEL releases every
// unit, which the next ADD can take again.
func checkDel(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	errs := []error{
		delExitsZero(s.del(ctx, s.requestID(1))),
		delExitsZero(s.del(ctx, "-x")),
		delExitsZero(s.call(ctx, "CDI_COMMAND=DEL", s.ver())),
	}
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return errors.Join(errs...) // what needs no device still counts
	}
	all := fmt.Sprintf("%s:%d", rs, s.facts.perRequest(rs))
	for i := 2; i <= 3; i++ {
		id := s.requestID(i)
		if _, _, err := s.add(ctx, all, id); err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, wantNothing(s.del(ctx, id)), delExitsZero(s.del(ctx, id)))
	}
	if s.facts.is010() {
		ids, err := s.listIDs(ctx)
		if err == nil && (slices.Contains(ids, s.requestID(2)) || slices.Contains(ids, s.requestID(3))) {
			err = fmt.Errorf("LIST still shows deleted request-ids: %v", ids)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// delExitsZero checks a DEL that has nothing to release: exit status 0,
// and an error document or nothing on stdout.
func delExitsZero(r *reply) error {
	if err := r.usable(); err != nil {
		return err
	}
	if r.status != 0 || (r.doc != nil && r.errorDoc() == nil) {
		return r.problem("want exit status 0 and an error document or nothing, got %s", r.seen())
	}
	return nil
}

// checkList: LIST shows each allocation with its request, creation time
// and the result ADD returned, oldest first, and no longer after DEL.
func checkList(ctx context.Context, s *subject) error {
	if err := s.facts.need010(); err != nil {
		return err
	}
	rs, n, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	added := map[string]*spec.AddResult{}
	for i := 1; i <= min(n, 2); i++ {
		res, _, err := s.add(ctx, rs+":1", s.requestID(i))
		if err != nil {
			return err
		}
		added[s.requestID(i)] = res
	}
	l, err := s.list(ctx)
	if err != nil {
		return err
	}
	if err := judgeList(l, rs+":1", added); err != nil {
		return err
	}
	if err := wantNothing(s.del(ctx, s.requestID(1))); err != nil {
		return err
	}
	ids, err := s.listIDs(ctx)
	if err == nil && slices.Contains(ids, s.requestID(1)) {
		err = fmt.Errorf("LIST still shows %s after DEL: %v", s.requestID(1), ids)
	}
	return err
}

// judgeList checks that l holds each added allocation as ADD returned it,
// and is ordered by creation time, then request-id.
func judgeList(l *spec.ListResult, request string, added map[string]*spec.AddResult) error {
	found := 0
	for i, a := range l.Allocations {
		if i > 0 {
			prev := l.Allocations[i-1]
			if a.Created.Before(prev.Created) || (a.Created.Equal(prev.Created) && a.RequestID < prev.RequestID) {
				return fmt.Errorf("LIST is not ordered by creation time, then request-id: %s before %s", prev.RequestID, a.RequestID)
			}
		}
		res, ok := added[a.RequestID]
		if !ok {
			continue
		}
		found++
		if a.Request != request || a.Created.IsZero() || !slices.Equal(a.Result.Devices, res.Devices) || !slices.Equal(a.Result.Units, res.Units) {
			return fmt.Errorf("LIST shows %s as %s, ADD of %q returned %s", a.RequestID, quote(mustJSON(a)), request, quote(mustJSON(res)))
		}
	}
	if found != len(added) {
		return fmt.Errorf("LIST shows %d of the %d allocations just made", found, len(added))
	}
	return nil
}

// checkGC: GC releases exactly the allocations whose request-ids are not
// valid, ignoring unknown and repeated valid ones, and prints them sorted;
// an empty list releases everything.
func checkGC(ctx context.Context, s *subject) error {
	if err := s.facts.need010(); err != nil {
		return err
	}
	rs, n, err := s.facts.pick(2)
	if err != nil {
		return err
	}
	others, err := s.listIDs(ctx) // not ours: always named valid
	if err != nil {
		return err
	}
	var ids []string
	for i := 1; i <= min(n, 3); i++ {
		if _, _, err := s.add(ctx, rs+":1", s.requestID(i)); err != nil {
			return err
		}
		ids = append(ids, s.requestID(i))
	}
	keep := ids[0]
	valid := append(slices.Clone(others), keep, s.requestID(99), keep)
	if err := s.gcReleases(ctx, valid, ids[1:]); err != nil {
		return err
	}
	if err := s.gcReleases(ctx, others, []string{keep}); err != nil {
		return err
	}
	if err := s.gcReleases(ctx, others, nil); err != nil || len(others) > 0 {
		return err
	}
	// Nobody else's allocation: the empty list may release everything.
	if _, _, err := s.add(ctx, rs+":1", s.requestID(4)); err != nil {
		return err
	}
	return s.gcReleases(ctx, nil, []string{s.requestID(4)})
}

// gcReleases runs GC with valid and checks that it released exactly want
// (sorted, [] when none) and that LIST no longer shows them.
func (s *subject) gcReleases(ctx context.Context, valid, want []string) error {
	r := s.call(ctx, "CDI_COMMAND=GC", s.ver(), "CDI_VALID_REQUEST_IDS="+strings.Join(valid, ","))
	var res spec.GCResult
	if err := wantResult(r, s.facts.version, &res); err != nil {
		return err
	}
	want = append([]string{}, want...)
	sort.Strings(want)
	if !slices.Equal(res.Released, want) || string(r.doc["released"]) == "null" {
		return r.problem("released %s, want %q", r.doc["released"], want)
	}
	ids, err := s.listIDs(ctx)
	for _, id := range want {
		if err == nil && slices.Contains(ids, id) {
			err = fmt.Errorf("LIST still shows %s after GC released it: %v", id, ids)
		}
	}
	return err
}
