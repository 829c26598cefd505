package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// maxProblems bounds the problems a condition's message names.
const maxProblems = 3

// look is what a look at a Broker found of its pool.
type look struct {
	// selected is how many devices the Broker selects.
	selected int
	// poolServed says whether any node serves the pool (poolServed).
	poolServed bool
	// noClass is the DeviceClass a DRA pool's claims request, when it
	// does not exist.
	noClass string
}

// status is br's status after a look: the devices selected, the
// workloads counted by state, and the conditions, from what the look
// found (lk), planned (pl) and met writing (res).
func (r *run) status(br *Broker, lk look, pl plan, res applied) Status {
	s := Status{ObservedGeneration: br.Generation, Devices: lk.selected, Workloads: len(pl.states),
		Conditions: cloneConditions(br.Status.Conditions)}
	for _, st := range pl.states {
		switch st {
		case Pending:
			s.Pending++
		case Active:
			s.Active++
		case Completed:
			s.Completed++
		case Failed:
			s.Failed++
		}
	}
	setCondition(&s, br, ConditionAccepted, true, ReasonAccepted, "the bridge acts on this Broker")
	failed := append(takenProblems(pl.problems), res.problems...)
	if len(failed) == 0 {
		setCondition(&s, br, ConditionCreated, true, ReasonCreated, "every workload the Broker wants exists")
	} else {
		setCondition(&s, br, ConditionCreated, false, failed[0].reason, summary(len(failed), "writes failed", failed))
	}
	reason, msg := readiness(br, lk, s, pl.problems, failed)
	setCondition(&s, br, ConditionReady, reason == ReasonReady, reason, msg)
	return s
}

// readiness is the Ready condition's reason and message: the first of
// what stands in the way, or Ready.
func readiness(br *Broker, lk look, s Status, planned, failed []problem) (reason, msg string) {
	switch {
	case !lk.poolServed:
		return ReasonNoSuchPool, fmt.Sprintf("no node serves pool %s: no Instance, node resource or ResourceSlice of it", br.Spec.Pool)
	case lk.noClass != "":
		return ReasonNoDeviceClass, fmt.Sprintf("DeviceClass %s, which the claims request, does not exist", lk.noClass)
	case lk.selected == 0:
		return ReasonNoDeviceSelected, fmt.Sprintf("the selector picks none of pool %s's devices", br.Spec.Pool)
	case br.Spec.strategy() == Pool && lk.selected < br.Spec.count():
		return ReasonNotEnoughDevices, fmt.Sprintf("count is %d, and the selector picks %d of pool %s's devices",
			br.Spec.count(), lk.selected, br.Spec.Pool)
	}
	for _, p := range planned {
		if p.reason == ReasonTooManyContainers {
			return p.reason, p.msg
		}
	}
	switch {
	case len(failed) > 0:
		return failed[0].reason, summary(len(failed), "workloads are not made", failed)
	case s.Pending > 0:
		return ReasonPending, fmt.Sprintf("%d of %d workloads have no pod running yet", s.Pending, s.Workloads)
	}
	return ReasonReady, "every workload the Broker wants runs or has finished"
}

// takenProblems is the NameTaken problems among ps.
func takenProblems(ps []problem) []problem {
	var out []problem
	for _, p := range ps {
		if p.reason == ReasonNameTaken {
			out = append(out, p)
		}
	}
	return out
}

// summary says n things went wrong, naming the first maxProblems of ps.
func summary(n int, what string, ps []problem) string {
	msgs := make([]string, 0, maxProblems)
	for _, p := range ps[:min(len(ps), maxProblems)] {
		msgs = append(msgs, p.msg)
	}
	return fmt.Sprintf("%d %s: %s", n, what, strings.Join(msgs, "; "))
}

// refused is the status of a Broker the controller does not act on:
// Accepted and Ready False with the reason, the counts as they were.
func refused(br *Broker, reason, msg string) Status {
	s := br.Status
	s.ObservedGeneration = br.Generation
	s.Conditions = cloneConditions(br.Status.Conditions)
	setCondition(&s, br, ConditionAccepted, false, reason, msg)
	setCondition(&s, br, ConditionReady, false, reason, msg)
	return s
}

func cloneConditions(c []metav1.Condition) []metav1.Condition {
	return append([]metav1.Condition(nil), c...)
}

// setCondition sets a condition, its transition time kept while its
// status stays: a look that finds things as they were writes nothing.
func setCondition(s *Status, br *Broker, typ string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: br.Generation, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))})
}

// writeStatus writes s as br's status unless it is what br has; the
// write is guarded by br's resourceVersion.
func (r *run) writeStatus(ctx context.Context, br *Broker, s Status) error {
	before, err := json.Marshal(br.Status)
	if err != nil {
		return err
	}
	after, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if string(before) == string(after) {
		return nil
	}
	u, err := r.brokerObject(brokerKey(br))
	if err != nil || u == nil {
		return err
	}
	u = u.DeepCopy()
	u.SetResourceVersion(br.ResourceVersion) // what s was worked out from
	return r.putStatus(ctx, u, s)
}

// putStatus writes s as the status of u, a Broker object, guarded by
// its resourceVersion.
func (r *run) putStatus(ctx context.Context, u *unstructured.Unstructured, s Status) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	u.Object["status"] = status
	got, err := r.cfg.Dynamic.Resource(Resource).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of Broker %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	r.recent.wrote(Kind, got)
	return nil
}
