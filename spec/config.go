package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec/plainjson"
)

// MaxConfigSize bounds what a plugin reads from stdin and a caller reads
// from a drop-in file. Real configurations are a few hundred bytes.
const MaxConfigSize = 1 << 20

// Config is a drop-in configuration, /etc/cdi/<type>.d/<plugin>.conf.
type Config struct {
	CDIVersion string          `json:"cdiVersion"`
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Plugin     string          `json:"plugin"`
	Args       json.RawMessage `json:"args,omitempty"`

	// Bytes is the document as it was read, which callers pipe to the plugin
	// unchanged.
	Bytes []byte `json:"-"`
}

// ParseConfig decodes and checks a configuration document. Every error wraps
// ErrMalformed and says which field is wrong. Unknown top-level fields are
// allowed, as in CNI, so newer configurations still load.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("%w: configuration is %d bytes, more than the %d allowed", ErrMalformed, len(data), MaxConfigSize)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: configuration is not a JSON object", ErrMalformed)
	}
	// gjson rather than encoding/json: see package plainjson.
	root, err := plainjson.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: configuration is not valid JSON, or has data after its object", ErrMalformed)
	}
	var c Config
	if err := plainjson.Read(root, &c); err != nil {
		return nil, fmt.Errorf("%w: configuration field %w", ErrMalformed, err)
	}
	c.Bytes = append([]byte(nil), data...)
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// AppendMembers describes c as a drop-in holds it.
func (c *Config) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &c.CDIVersion),
		plainjson.String("name", &c.Name),
		plainjson.String("type", &c.Type),
		plainjson.String("plugin", &c.Plugin),
		plainjson.Raw("args", (*[]byte)(&c.Args)).OmitEmpty(),
	)
}

func (c *Config) check() error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"cdiVersion", c.CDIVersion}, {"name", c.Name}, {"type", c.Type}, {"plugin", c.Plugin},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: configuration lacks required field(s): %s", ErrMalformed, strings.Join(missing, ", "))
	}
	if err := CheckResourceType(c.Type); err != nil {
		return fmt.Errorf("configuration field type: %w", err)
	}
	if strings.ContainsAny(c.Plugin, `/\`) || c.Plugin == "." || c.Plugin == ".." {
		return fmt.Errorf("%w: configuration field plugin %q must be a file name, not a path", ErrMalformed, c.Plugin)
	}
	if len(c.Args) > 0 && !gjson.ParseBytes(c.Args).IsObject() && string(c.Args) != "null" {
		return fmt.Errorf("%w: configuration field args must be a JSON object", ErrMalformed)
	}
	return nil
}

// Arg returns the value at a gjson path inside args (e.g. "root" or
// "groups.#.name"); a missing path gives a result whose Exists is false.
func (c *Config) Arg(path string) gjson.Result {
	if len(c.Args) == 0 {
		return gjson.Result{}
	}
	return gjson.GetBytes(c.Args, path)
}

// PeekVersion returns the cdiVersion of a configuration document without
// checking anything else, or "" when it has none. Plugins use it to pick the
// version of an error document before the configuration has been validated.
func PeekVersion(data []byte) string {
	v := gjson.GetBytes(data, "cdiVersion")
	if v.Type != gjson.String {
		return ""
	}
	return v.String()
}
