package spec

import (
	"reflect"
	"testing"
)

func TestJoinValues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dst, src map[string]string
		want     map[string]string
	}{
		{"into nil", nil, map[string]string{"A": "1"}, map[string]string{"A": "1"}},
		{"nothing to add", map[string]string{"A": "1"}, nil, map[string]string{"A": "1"}},
		{"joined in order", map[string]string{"A": "1"}, map[string]string{"A": "2", "B": "x"}, map[string]string{"A": "1,2", "B": "x"}},
		{"a value given before is not repeated", map[string]string{"A": "1,2"}, map[string]string{"A": "2"}, map[string]string{"A": "1,2"}},
		{"a value that only contains another is new", map[string]string{"A": "10"}, map[string]string{"A": "1"}, map[string]string{"A": "10,1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := JoinValues(tc.dst, tc.src); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("JoinValues = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAppendMounts(t *testing.T) {
	a := Mount{HostPath: "/a", ContainerPath: "/m"}
	b := Mount{HostPath: "/b", ContainerPath: "/m"}
	c := Mount{HostPath: "/c", ContainerPath: "/n"}
	if got := AppendMounts([]Mount{a}, []Mount{b, c}); !reflect.DeepEqual(got, []Mount{a, c}) {
		t.Errorf("AppendMounts = %v, want the first mount of /m kept and /n added", got)
	}
}

func TestDeviceNodeWithDefaults(t *testing.T) {
	if got := (DeviceNode{HostPath: "/dev/x"}).WithDefaults(); got != (DeviceNode{HostPath: "/dev/x", ContainerPath: "/dev/x", Permissions: "rw"}) {
		t.Errorf("defaults %+v", got)
	}
	n := DeviceNode{HostPath: "/dev/x", ContainerPath: "/dev/y", Permissions: "r"}
	if got := n.WithDefaults(); got != n {
		t.Errorf("a node with every field became %+v", got)
	}
}
