package drafront

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// nodeClaims reads which claims are in use on a node: the pods the
// kubelet runs, each read by its name, and each claim they name. Nothing
// is listed: what a node reads grows with its own pods, never with the
// cluster's.
type nodeClaims struct {
	client kubernetes.Interface
	node   string
}

// read reads each pod of running (<namespace>/<name>, the kubelet's) and
// each claim those bound to the node and not done name, and each claim
// of also (<namespace>/<name>). It returns the claims the API server has,
// by <namespace>/<name>, and the UIDs of those in use here: allocated,
// and reserved for one of those pods that names it.
func (r nodeClaims) read(ctx context.Context, running, also []string) (map[string]*resourceapi.ResourceClaim, map[types.UID]bool, error) {
	var pods []*corev1.Pod
	names := map[string]bool{}
	for _, key := range also {
		names[key] = true
	}
	for _, key := range slices.Sorted(slices.Values(running)) {
		pod, err := r.pod(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if pod == nil || pod.Spec.NodeName != r.node || podDone(pod) {
			continue
		}
		pods = append(pods, pod)
		for _, name := range podClaims(pod) {
			names[pod.Namespace+"/"+name] = true
		}
	}
	claims := make(map[string]*resourceapi.ResourceClaim, len(names))
	for key := range names {
		c, err := r.claim(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if c != nil {
			claims[key] = c
		}
	}
	return claims, inUse(pods, claims), nil
}

// inUse is the UIDs of claims that are allocated and reserved for one of
// pods that names it.
func inUse(pods []*corev1.Pod, claims map[string]*resourceapi.ResourceClaim) map[types.UID]bool {
	used := map[types.UID]bool{}
	for _, pod := range pods {
		for _, name := range podClaims(pod) {
			c := claims[pod.Namespace+"/"+name]
			if c != nil && c.Status.Allocation != nil && resourceclaim.IsReservedForPod(pod, c, true) {
				used[c.UID] = true
			}
		}
	}
	return used
}

// podClaims is the names of pod's claims: those its spec names, those
// made for it from templates (its status says which), and the one made
// for its extended resources.
func podClaims(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.ResourceClaims {
		if name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i]); err == nil && name != nil {
			out = append(out, *name)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil && s.ResourceClaimName != "" {
		out = append(out, s.ResourceClaimName)
	}
	return out
}

// podDone says whether pod's containers are all done for good.
func podDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// pod is the API server's pod <namespace>/<name> key, nil if it has none.
func (r nodeClaims) pod(ctx context.Context, key string) (*corev1.Pod, error) {
	ns, name, _ := strings.Cut(key, "/")
	p, err := r.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return p, nil
}

// claim is the API server's claim <namespace>/<name> key, nil if it has
// none.
func (r nodeClaims) claim(ctx context.Context, key string) (*resourceapi.ResourceClaim, error) {
	ns, name, _ := strings.Cut(key, "/")
	c, err := r.client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ResourceClaim %s: %w", key, err)
	}
	return c, nil
}
