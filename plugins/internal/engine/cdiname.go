package engine

import (
	"fmt"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/cdiexec/cdi/spec"
)

// checkCDIKind checks the cdiKind arg, "<vendor>/<class>", by the rules of
// CDI's own parser, so that every name an ADD result puts in cdiDevices is
// one a CDI runtime accepts: vendor and class each start with a letter,
// end with a letter or digit, and hold letters, digits, '_', '-' and '.'.
func checkCDIKind(kind string) error {
	vendor, class := parser.ParseQualifier(kind)
	if vendor == "" {
		return spec.NewError(spec.CodeInvalidConfig, "args.cdiKind %q must be <vendor>/<class>, e.g. example.com/gpu", kind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return spec.NewError(spec.CodeInvalidConfig, "args.cdiKind %q is not a CDI kind: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return spec.NewError(spec.CodeInvalidConfig, "args.cdiKind %q is not a CDI kind: %w", kind, err)
	}
	return nil
}

// CheckDeviceID says whether id may name a device of this project's
// plugins: a device-id of the protocol (spec.CheckDeviceID) that is also a
// CDI device name, which ends with a letter or digit, so that the
// "<cdiKind>=<id>" of an ADD result is a valid CDI qualified name and the
// bridge can offer the device. Errors wrap spec.ErrMalformed.
func CheckDeviceID(id string) error {
	if err := spec.CheckDeviceID(id); err != nil {
		return err
	}
	if err := parser.ValidateDeviceName(id); err != nil {
		return fmt.Errorf("%w: device-id %q is not a CDI device name: %w", spec.ErrMalformed, id, err)
	}
	return nil
}
