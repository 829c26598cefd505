package schedtest

import (
	"context"
	"os"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// examplesDir holds the shipped DRA examples, relative to the
// repository's root.
const examplesDir = "bridge/deploy/examples/dra/"

// CreateExamples creates the shipped DeviceClasses and, in the test's
// namespace, ResourceClaimTemplates, as they are: the tests use what a
// cluster's administrator is given.
func (c *Cluster) CreateExamples(t testing.TB) {
	t.Helper()
	for _, class := range decodeExamples[resourceapi.DeviceClass](t, "deviceclasses.yaml") {
		if _, err := c.Client.ResourceV1().DeviceClasses().Create(t.Context(), class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tmpl := range decodeExamples[resourceapi.ResourceClaimTemplate](t, "claimtemplates.yaml") {
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(c.Namespace).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// decodeExamples is the objects of file, one of the shipped DRA
// examples, decoded strictly so that a misspelt field fails the test
// rather than vanish.
func decodeExamples[T any](t testing.TB, file string) []*T {
	t.Helper()
	var objs []*T
	for _, doc := range exampleDocs(t, file) {
		obj := new(T)
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// exampleDocs is the YAML documents of file, one of the shipped DRA
// examples.
func exampleDocs(t testing.TB, file string) [][]byte {
	t.Helper()
	path, err := apitest.RepoFile(examplesDir + file)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range strings.Split(string(data), "\n---\n") {
		docs = append(docs, []byte(d))
	}
	return docs
}

// BindDRARole gives user what the DRA front end's shipped RBAC (the
// examples' rbac.yaml) gives the bridge's ServiceAccount and nothing
// else, so that a test shows it is enough: its ClusterRole and Roles,
// each bound to user.
func BindDRARole(t testing.TB, client kubernetes.Interface, user string) {
	t.Helper()
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, doc := range exampleDocs(t, "rbac.yaml") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ClusterRole":
			var role rbacv1.ClusterRole
			decodeStrict(t, doc, &role)
			create(t, client.RbacV1().ClusterRoles().Create, &role)
			create(t, client.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: subjects})
		case "Role":
			var role rbacv1.Role
			decodeStrict(t, doc, &role)
			create(t, client.RbacV1().Roles(role.Namespace).Create, &role)
			create(t, client.RbacV1().RoleBindings(role.Namespace).Create, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subjects})
		}
	}
}

func decodeStrict(t testing.TB, doc []byte, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatal(err)
	}
}

func create[T any](t testing.TB, fn func(context.Context, T, metav1.CreateOptions) (T, error), obj T) {
	t.Helper()
	if _, err := fn(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
