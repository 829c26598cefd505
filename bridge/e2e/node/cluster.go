package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// PodNamespace is where the test's pods run.
const PodNamespace = "default"

// deployDir holds the bridge's manifests, relative to the repository.
const deployDir = "bridge/deploy"

// Cluster is the node's control plane: etcd and a kube-apiserver that
// authorizes kubelets as nodes, with the bridge's manifests applied.
type Cluster struct {
	Env     *apitest.Env
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace is the bridge's, from the kustomization.
	Namespace string
	// NodeKubeconfig is the kubelet's credentials, BridgeKubeconfig the
	// bridge's ServiceAccount's.
	NodeKubeconfig, BridgeKubeconfig string
}

// StartCluster starts etcd and the apiserver with a token for the kubelet
// of node, applies the bridge's manifests except its DaemonSet, and makes
// the pods' ServiceAccount and the bridge's credentials.
func StartCluster(t testing.TB, l Layout, node string) *Cluster {
	t.Helper()
	nodeUser := "system:node:" + node
	// apitest's logs go with the node's, kept when the test fails.
	dir := filepath.Join(l.Logs(), "apiserver")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := apitest.Start(t, apitest.Options{
		Dir:       dir,
		Users:     []apitest.User{{Name: nodeUser, Groups: []string{"system:nodes"}}},
		Etcd:      l.Programs.Etcd,
		APIServer: l.Programs.APIServer,
		ExtraArgs: []string{
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			// Else `kubectl logs` and the like try the node's name in DNS.
			"--kubelet-preferred-address-types=InternalIP",
		},
	})
	c := &Cluster{Env: env, NodeKubeconfig: env.Kubeconfig(t, nodeUser)}
	var err error
	if c.Client, err = kubernetes.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	account, err := c.applyDeploy(t.Context(), filepath.Join(l.Repo, deployDir))
	if err != nil {
		t.Fatal(err)
	}
	// No controller-manager makes default ServiceAccounts; pod admission
	// wants the pod's.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.Client.CoreV1().ServiceAccounts(PodNamespace).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.BridgeKubeconfig = c.accountKubeconfig(t, account)
	return c
}

// applyDeploy creates the objects of the kustomization in dir as `kubectl
// apply -k` would, but for the DaemonSet (createDaemonSet creates it where
// the bridge runs as a pod), and returns the ServiceAccount's name.
func (c *Cluster) applyDeploy(ctx context.Context, dir string) (account string, err error) {
	k, err := readKustomization(dir)
	if err != nil {
		return "", err
	}
	c.Namespace = k.Namespace
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	for _, res := range k.Resources {
		objs, err := readDocuments(filepath.Join(dir, res))
		if err != nil {
			return "", err
		}
		for _, obj := range objs {
			if obj.GetKind() == "ServiceAccount" {
				account = obj.GetName()
			}
			if err := c.create(ctx, mapper, filepath.Join(dir, res), obj, c.Namespace); err != nil {
				return "", err
			}
		}
	}
	if account == "" {
		return "", fmt.Errorf("%s: no ServiceAccount", dir)
	}
	return account, nil
}

// create creates one object of file, in namespace ns where it has one; a
// ServiceAccount subject with no namespace is given the bridge's. A CRD is
// waited for until its resources are served.
func (c *Cluster) create(ctx context.Context, mapper meta.RESTMapper, file string, obj *unstructured.Unstructured, ns string) error {
	switch obj.GetKind() {
	case "DaemonSet":
		return nil
	case "CustomResourceDefinition":
		return apitest.InstallCRD(ctx, c.Env.Config, file)
	}
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var r dynamic.ResourceInterface = c.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		obj.SetNamespace(ns)
		r = c.Dynamic.Resource(m.Resource).Namespace(ns)
	}
	if err := setSubjectNamespaces(obj, c.Namespace); err != nil {
		return err
	}
	if _, err := r.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating %s %s from %s: %w", obj.GetKind(), obj.GetName(), file, err)
	}
	return nil
}

// setSubjectNamespaces gives a binding's ServiceAccount subjects that
// have none the namespace, as kustomize's namespace transformer does.
func setSubjectNamespaces(obj *unstructured.Unstructured, ns string) error {
	subjects, found, err := unstructured.NestedSlice(obj.Object, "subjects")
	if !found || err != nil {
		return err
	}
	for _, s := range subjects {
		if s, ok := s.(map[string]any); ok && s["kind"] == "ServiceAccount" && s["namespace"] == nil {
			s["namespace"] = ns
		}
	}
	return unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readDocuments parses the YAML documents of a file, skipping empty ones.
func readDocuments(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for i, doc := range docSeparator.Split(string(data), -1) {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	return objs, nil
}

// accountKubeconfig asks the API server for a token of the ServiceAccount
// (as the kubelet does for a pod's projected token) and writes a
// kubeconfig with it.
func (c *Cluster) accountKubeconfig(t testing.TB, account string) string {
	t.Helper()
	expiry := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}
	tr, err := c.Client.CoreV1().ServiceAccounts(c.Namespace).CreateToken(t.Context(), account, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for ServiceAccount %s/%s: %v", c.Namespace, account, err)
	}
	path := filepath.Join(t.TempDir(), account+".kubeconfig")
	if err := writeKubeconfig(path, c.Env.Config, account, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeKubeconfig(path string, server *rest.Config, user, token string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["node"] = &clientcmdapi.Cluster{Server: server.Host, CertificateAuthorityData: server.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: user}
	kc.CurrentContext = "node"
	return clientcmd.WriteToFile(*kc, path)
}
