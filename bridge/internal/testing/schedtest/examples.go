package schedtest

import (
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

// BindDRARole gives user the shipped ClusterRole of the DRA front end
// (the first document of the examples' rbac.yaml) and nothing else, so
// that a test shows it is enough.
func BindDRARole(t testing.TB, client kubernetes.Interface, user string) {
	t.Helper()
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(exampleDocs(t, "rbac.yaml")[0], &role); err != nil || role.Kind != "ClusterRole" {
		t.Fatalf("rbac.yaml's first document: %+v, %v", role, err)
	}
	if _, err := client.RbacV1().ClusterRoles().Create(t.Context(), &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
