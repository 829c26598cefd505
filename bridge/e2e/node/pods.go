package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/cdiexec/cdi/bridge/e2e/node/internal/report"
)

// Bounds of the pod waits. A pod with a local image runs within about a
// second here; these leave room for a loaded machine and say, when they
// run out, what the pod was waiting for.
const (
	podStartWait  = time.Minute
	podDeleteWait = time.Minute
	reportWait    = 30 * time.Second
	pollInterval  = 250 * time.Millisecond
)

// containerName is every test pod's one container.
const containerName = "check"

// newPod is a pod on node whose container asks for resources (name to
// amount) and reports what it sees into reportDir. It uses the host's
// network (no CNI), the local image only, and no ServiceAccount token (no
// volume for the kubelet to mount).
func newPod(name, node, reportDir string, resources map[string]int64) *corev1.Pod {
	limits := corev1.ResourceList{}
	for r, n := range resources {
		limits[corev1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	grace, automount := int64(1), false
	dirType := corev1.HostPathDirectory
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PodNamespace},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &automount,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: containerName, Image: imageName, ImagePullPolicy: corev1.PullNever,
				Args:         []string{"report", "/report"},
				Resources:    corev1.ResourceRequirements{Limits: limits},
				VolumeMounts: []corev1.VolumeMount{{Name: "report", MountPath: "/report"}},
			}},
			Volumes: []corev1.Volume{{Name: "report", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: reportDir, Type: &dirType}}}},
		},
	}
}

// waitRunning waits until the pod's container runs. A pod that fails
// (refused at admission, say) ends the wait at once; one that waits (a
// container that cannot be created) ends it at podStartWait. Either way
// the error says what the pod last showed, with its events.
func waitRunning(ctx context.Context, client kubernetes.Interface, name string) (*corev1.Pod, error) {
	return waitRunningWithin(ctx, client, name, podStartWait)
}

// waitRunningWithin is waitRunning bounded by within.
func waitRunningWithin(ctx context.Context, client kubernetes.Interface, name string, within time.Duration) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var pod *corev1.Pod
	var err error
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		pod, err = client.CoreV1().Pods(PodNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if running(pod) {
			return pod, nil
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			break
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("pod %s: never read: %w", name, err)
	}
	return nil, fmt.Errorf("pod %s not running after %v:\n%s", name, within, describePod(client, pod))
}

// running reports whether the pod's container is running.
func running(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == containerName {
			return pod.Status.Phase == corev1.PodRunning && s.State.Running != nil
		}
	}
	return false
}

// describePod says what the pod shows: phase, conditions, the container's
// state (a waiting container's reason and message are the runtime's
// error) and the pod's events.
func describePod(client kubernetes.Interface, pod *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  phase %s %s %s\n", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	for _, c := range pod.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, s := range pod.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			fmt.Fprintf(&b, "  container %s waiting: %s: %s\n", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Terminated != nil:
			t := s.State.Terminated
			fmt.Fprintf(&b, "  container %s terminated: %s (exit %d): %s\n", s.Name, t.Reason, t.ExitCode, t.Message)
		case s.State.Running != nil:
			fmt.Fprintf(&b, "  container %s running since %v\n", s.Name, s.State.Running.StartedAt)
		}
	}
	// A fresh context: the caller's may be what ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	selector := fields.OneTermEqualSelector("involvedObject.name", pod.Name).String()
	events, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
		return b.String()
	}
	for _, e := range events.Items {
		fmt.Fprintf(&b, "  event %s %s (x%d): %s\n", e.Type, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

// deletePod deletes the pod and waits until it is gone: the kubelet has
// stopped its container and confirmed.
func deletePod(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, podDeleteWait)
	defer cancel()
	var pod *corev1.Pod
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		pod, err = client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
	}
	if pod == nil {
		return fmt.Errorf("pod %s still there %v after its deletion: %w", name, podDeleteWait, err)
	}
	return fmt.Errorf("pod %s still there %v after its deletion:\n%s", name, podDeleteWait, describePod(client, pod))
}

// readReport waits for podcheck's report in dir and decodes it.
func readReport(ctx context.Context, dir string) (report.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, reportWait)
	defer cancel()
	path := filepath.Join(dir, report.FileName)
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var r report.Report
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		return r, err
	}
	return report.Report{}, fmt.Errorf("no %s within %v of the container's start", path, reportWait)
}
