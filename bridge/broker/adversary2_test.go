package broker

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// Adversarial tests, second round, against the real API server of
// startHarness, or of startHarnessAsBridge: the controller holding only
// the access the shipped RBAC gives it.

// brokersRBAC is the shipped RBAC of Brokers for kustomize, which the
// chart's is held equal to.
const brokersRBAC = "bridge/deploy/examples/brokers/rbac.yaml"

// bridgeUser is the identity the controller runs as in
// startHarnessAsBridge.
const bridgeUser = "bridge"

// startHarnessAsBridge is startHarness whose controller runs as a user
// holding brokersRBAC's ClusterRole and, in the test's namespace, its
// Role, and of the bridge's own role what the controller reads (Nodes'
// list and watch): no more.
func startHarnessAsBridge(t *testing.T) *harness {
	t.Helper()
	h, env := startHarnessWith(t, apitest.Options{Users: []apitest.User{{Name: bridgeUser}}})
	c := h.Cluster
	bindShippedRBAC(t, c.Client, c.Namespace)
	user, err := env.ConfigFor(bridgeUser)
	if err != nil {
		t.Fatal(err)
	}
	h.clientConfig(user)
	// RBAC in force: the user may list Jobs of the namespace.
	uc, err := kubernetes.NewForConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		_, err := uc.BatchV1().Jobs(c.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the shipped RBAC never let the bridge list Jobs: %v", err)
	}
	return h
}

// bindShippedRBAC creates brokersRBAC's roles, the namespaced ones in ns,
// bound to bridgeUser, and a ClusterRole of the Nodes' list and watch
// (the bridge's own role has them).
func bindShippedRBAC(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	path, err := apitest.RepoFile(brokersRBAC)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: bridgeUser}}
	ctx := t.Context()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = yaml.Unmarshal([]byte(doc), &r)
			if err == nil {
				_, err = client.RbacV1().ClusterRoles().Create(ctx, &r, metav1.CreateOptions{})
			}
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = yaml.Unmarshal([]byte(doc), &b)
			b.Subjects = subjects
			if err == nil {
				_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{})
			}
		case "Role":
			var r rbacv1.Role
			err = yaml.Unmarshal([]byte(doc), &r)
			r.Namespace = ns
			if err == nil {
				_, err = client.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{})
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = yaml.Unmarshal([]byte(doc), &b)
			b.Namespace, b.Subjects = ns, subjects
			if err == nil {
				_, err = client.RbacV1().RoleBindings(ns).Create(ctx, &b, metav1.CreateOptions{})
			}
		}
		if err != nil {
			t.Fatalf("%s of %s: %v", head.Kind, brokersRBAC, err)
		}
	}
	own := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-own"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}}}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ownBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: own.Name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: own.Name}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, ownBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAdversary2UnlabelledServiceIsPutBackUnderShippedRBAC shows that
// the labels of a Service put back by nameHeld (a JSON patch of the
// Service) are never put back by a bridge that has the access the
// chart and the kustomize RBAC give it: they grant Services list,
// watch, create, update and delete, not patch (nor ResourceClaimTemplates
// patch). The patch is Forbidden at every look; the Service stays
// hidden from the controller, which neither puts back any other edit of
// it nor deletes it with its device, and the Broker is retried with
// backoff for ever, its status saying a write failed.
func TestAdversary2UnlabelledServiceIsPutBackUnderShippedRBAC(t *testing.T) {
	h := startHarnessAsBridge(t)
	cam := h.store.set("relabel-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	br := deploymentsBroker("relabel", 1, 1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}}}
	h.create(t, br)
	name := workloadName("relabel", cam.Name)
	svcs := h.Client.CoreV1().Services(h.Namespace)
	if !within(t, 30*time.Second, "the device's Service", func() bool {
		_, err := svcs.Get(t.Context(), name, metav1.GetOptions{})
		return err == nil
	}) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelBroker: nil}}})
	if _, err := svcs.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.update(t, "relabel", func(s *Spec) { s.DeletionGraceSeconds = ptr.To[int64](61) })
	if !within(t, 30*time.Second, "the Service's label put back", func() bool {
		s, err := svcs.Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && s.Labels[LabelBroker] == "relabel"
	}) {
		c := condition(h.broker(t, "relabel"), ConditionCreated)
		t.Logf("the Broker's Created: %s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// TestAdversary2RefusedPatchIsBackedOffUnderShippedRBAC shows that the
// fix of a patch refused by an admission policy (changedSince, which
// reads the object to tell a refusal from a change) does nothing for a
// bridge that has the access the chart and the kustomize RBAC give it:
// they grant Jobs, Deployments and Services no get, changedSince's read
// is Forbidden, a read that fails counts as "changed", and the refused
// patch is retried every second for ever (retrySoon), without backoff
// and without a word in the status: what the first round's
// TestAdversaryPatchRefusedByPolicyIsBackedOffAndTold shows, which
// passes only because its controller is the cluster's admin.
func TestAdversary2RefusedPatchIsBackedOffUnderShippedRBAC(t *testing.T) {
	h := startHarnessAsBridge(t)
	if !h.policedJob(t, 60) {
		return
	}
	h.writes.take()
	h.store.set("policed-cam")
	patches, told := h.watchRefusals(t)
	if patches > 6 {
		t.Errorf("%d PATCHes of the Job in 20 s, each refused by the same policy; want a growing backoff (at most 6)", patches)
	}
	if told == "" {
		t.Errorf("Created never False saying that the Job's patch is refused")
	}
}
