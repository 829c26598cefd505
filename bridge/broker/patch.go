package broker

import (
	"encoding/json"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jsonOp is one operation of a JSON patch (RFC 6902).
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patchOf is a patch action of obj with ops, after a test of obj's UID:
// a patch never lands on another object of the name.
func patchOf(obj metav1.Object, ops ...jsonOp) action {
	all := append([]jsonOp{{Op: "test", Path: "/metadata/uid", Value: obj.GetUID()}}, ops...)
	body, _ := json.Marshal(all) // of strings and string slices: never fails
	return action{op: patch, obj: obj, body: body, jsonPatch: true}
}

// finalizersPatch is a patch of obj's finalizers to next, standing on
// them being as obj has them: another writer's change in between (the
// garbage collector's foregroundDeletion) makes it fail, not vanish.
func finalizersPatch(obj metav1.Object, next []string) action {
	return patchOf(obj, finalizersOps(obj, next)...)
}

// finalizersPatchAsSeen is finalizersPatch standing on obj being as seen
// (its resourceVersion): any change in between makes it fail.
func finalizersPatchAsSeen(obj metav1.Object, next []string) action {
	return patchOf(obj, append([]jsonOp{{Op: "test", Path: "/metadata/resourceVersion", Value: obj.GetResourceVersion()}},
		finalizersOps(obj, next)...)...)
}

func finalizersOps(obj metav1.Object, next []string) []jsonOp {
	if len(obj.GetFinalizers()) == 0 {
		return []jsonOp{{Op: "add", Path: "/metadata/finalizers", Value: next}}
	}
	if next == nil {
		next = []string{}
	}
	return []jsonOp{{Op: "test", Path: "/metadata/finalizers", Value: obj.GetFinalizers()},
		{Op: "replace", Path: "/metadata/finalizers", Value: next}}
}

// annotate is a patch setting obj's annotation key to value, or taking
// it off for "".
func annotate(obj metav1.Object, key, value string) action {
	path := "/metadata/annotations/" + pointerEscape(key)
	switch {
	case value == "":
		return patchOf(obj, jsonOp{Op: "remove", Path: path})
	case obj.GetAnnotations() == nil:
		return patchOf(obj, jsonOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{key: value}})
	}
	return patchOf(obj, jsonOp{Op: "add", Path: path, Value: value})
}

// pointerEscape escapes s as a JSON pointer's reference token.
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
