package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec/jsonread"
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
	root, err := jsonread.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: configuration is not valid JSON, or has data after its object: %w", ErrMalformed, err)
	}
	var c Config
	if err := jsonread.Read(root, &c); err != nil {
		return nil, fmt.Errorf("%w: configuration field %w", ErrMalformed, err)
	}
	c.Bytes = append([]byte(nil), data...)
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
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
	// Args is the text of a value Parse has checked, so its first byte
	// tells its kind.
	if len(c.Args) > 0 && c.Args[0] != '{' && string(c.Args) != "null" {
		return fmt.Errorf("%w: configuration field args must be a JSON object", ErrMalformed)
	}
	return nil
}

// PeekVersion returns the cdiVersion of a configuration document without
// checking anything else, or "" when it has none. Plugins use it to pick the
// version of an error document before the configuration has been validated.
func PeekVersion(data []byte) string {
	// gjson reads up to the member it looks for and no further, so that
	// a document broken after it still has a version.
	if !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
		return ""
	}
	v := gjson.GetBytes(data, "cdiVersion")
	if v.Type != gjson.String || len(v.Raw) < 2 || v.Raw[len(v.Raw)-1] != '"' {
		return ""
	}
	return v.String()
}
