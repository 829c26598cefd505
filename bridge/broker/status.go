package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// maxProblems bounds the problems a Created condition's message names.
const maxProblems = 3

// status is br's status after a look: selected devices, the units'
// entries, and the problems met making them.
func (r *run) status(br *Broker, selected int, entries map[string]WorkloadStatus, problems []string) Status {
	s := Status{ObservedGeneration: br.Generation, Devices: selected, Conditions: cloneConditions(br.Status.Conditions)}
	for _, key := range sortedKeys(entries) {
		e := entries[key]
		s.Workloads = append(s.Workloads, e)
		switch e.State {
		case Active:
			s.Active++
		case Completed:
			s.Completed++
		case Failed:
			s.Failed++
		}
	}
	setCondition(&s, br, ConditionAccepted, true, ReasonAccepted, "the bridge acts on this Broker")
	if len(problems) == 0 {
		setCondition(&s, br, ConditionCreated, true, ReasonCreated, "every workload the Broker wants exists")
		return s
	}
	reason := ReasonCreateFailed
	if strings.HasPrefix(problems[0], ReasonNameTaken) {
		reason = ReasonNameTaken
	}
	msg := fmt.Sprintf("%d writes failed: %s", len(problems), strings.Join(problems[:min(len(problems), maxProblems)], "; "))
	setCondition(&s, br, ConditionCreated, false, reason, msg)
	return s
}

// refused is the status of a Broker the controller does not act on:
// Accepted False, and nothing else changed.
func (r *run) refused(br *Broker, reason, msg string) Status {
	s := br.Status
	s.ObservedGeneration = br.Generation
	s.Conditions = cloneConditions(br.Status.Conditions)
	setCondition(&s, br, ConditionAccepted, false, reason, msg)
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
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return err
	}
	u.Object["status"] = status
	u.SetResourceVersion(br.ResourceVersion)
	got, err := r.cfg.Dynamic.Resource(Resource).Namespace(br.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of Broker %s: %w", brokerKey(br), err)
	}
	r.recent.wrote(Kind, got)
	return nil
}
