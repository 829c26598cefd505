package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomization.yaml that render
// implements. Strict decoding refuses any other field, so that a field
// added to the file is taught to render rather than silently ignored.
type kustomization struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Namespace  string          `json:"namespace"`
	Resources  []string        `json:"resources"`
	Images     []imageOverride `json:"images"`
}

type imageOverride struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
	Digest  string `json:"digest"`
}

// clusterScoped are the kinds kustomize gives no namespace (it knows them
// from a built-in schema, not from a server). apply checks each object's
// scope against the server's, so a kind missing here shows up there.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"PriorityClass": true, "StorageClass": true, "PersistentVolume": true, "RuntimeClass": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true, "APIService": true,
}

// kindOrder is kustomize's output order (its "legacy" order), which is
// also an order the API server accepts: a namespace and the CRDs before
// what lives in them, an account before its bindings.
var kindOrder = []string{"Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
	"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret",
	"Service", "PriorityClass", "Deployment", "StatefulSet", "DaemonSet"}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// render reads dir/kustomization.yaml and returns its objects as
// `kubectl kustomize dir` would: the namespace applied, the images
// replaced, in kustomize's order.
func render(dir string) (*kustomization, []*unstructured.Unstructured, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, nil, err
	}
	k := &kustomization{}
	if err := yaml.UnmarshalStrict(data, k); err != nil {
		return nil, nil, fmt.Errorf("kustomization.yaml (render implements only some fields): %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, res := range k.Resources {
		docs, err := readDocuments(filepath.Join(dir, res))
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, docs...)
	}
	for _, obj := range objs {
		if err := k.transform(obj); err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return kindRank(a) - kindRank(b) })
	return k, objs, nil
}

func kindRank(obj *unstructured.Unstructured) int {
	if i := slices.Index(kindOrder, obj.GetKind()); i >= 0 {
		return i
	}
	return len(kindOrder)
}

// readDocuments parses every YAML document in the file at path; one of
// comments only is no object.
func readDocuments(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("resource %s (render takes files, not directories): %w", path, err)
	}
	return parseDocuments(path, data)
}

// parseDocuments parses every YAML document in data, read from name.
func parseDocuments(name string, data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, doc := range docSeparator.Split(string(data), -1) {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", name, i+1, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s, document %d: no kind, apiVersion or name", name, i+1)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// transform does to one object what kustomize's namespace and image
// transformers do.
func (k *kustomization) transform(obj *unstructured.Unstructured) error {
	if k.Namespace != "" {
		if err := k.setNamespace(obj); err != nil {
			return err
		}
	}
	for _, field := range []string{"containers", "initContainers"} {
		containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", field)
		if err != nil {
			return err
		}
		for _, c := range containers {
			if c, ok := c.(map[string]any); ok {
				image, _ := c["image"].(string)
				c["image"] = k.image(image)
			}
		}
		if containers != nil {
			if err := unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", field); err != nil {
				return err
			}
		}
	}
	return nil
}

// setNamespace: namespaced objects go into the namespace; a Namespace
// object is renamed to it; binding subjects that are ServiceAccounts with
// no namespace, or "default", get it (kustomize's defaultOnly mode).
func (k *kustomization) setNamespace(obj *unstructured.Unstructured) error {
	switch {
	case obj.GetKind() == "Namespace":
		obj.SetName(k.Namespace)
	case !clusterScoped[obj.GetKind()]:
		obj.SetNamespace(k.Namespace)
	}
	subjects, found, err := unstructured.NestedSlice(obj.Object, "subjects")
	if !found || err != nil {
		return err
	}
	for _, s := range subjects {
		if s, ok := s.(map[string]any); ok && s["kind"] == "ServiceAccount" && (s["namespace"] == nil || s["namespace"] == "default") {
			s["namespace"] = k.Namespace
		}
	}
	return unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
}

// image applies the first images entry whose name is the image's name.
func (k *kustomization) image(image string) string {
	name, tag := splitImage(image)
	for _, o := range k.Images {
		if o.Name != name {
			continue
		}
		if o.NewName != "" {
			name = o.NewName
		}
		switch {
		case o.Digest != "":
			tag = "@" + o.Digest
		case o.NewTag != "":
			tag = ":" + o.NewTag
		}
		return name + tag
	}
	return image
}

// splitImage splits an image reference into its name and its ":tag" or
// "@digest"; a registry's ":port" is part of the name.
func splitImage(image string) (name, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], image[i:]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i:]
	}
	return image, ""
}
