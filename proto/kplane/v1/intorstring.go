package kplanev1

import "strconv"

// IntOrString types, as Kubernetes' intstr.Type.
const (
	// IntOrStringInt marks an IntOrString holding int_val.
	IntOrStringInt int64 = 0
	// IntOrStringString marks an IntOrString holding str_val.
	IntOrStringString int64 = 1
)

// IntOrStringFromInt32 returns an IntOrString holding the number v.
func IntOrStringFromInt32(v int32) *IntOrString {
	return &IntOrString{Type: IntOrStringInt, IntVal: v}
}

// IntOrStringFromString returns an IntOrString holding the string s (a
// port name).
func IntOrStringFromString(s string) *IntOrString {
	return &IntOrString{Type: IntOrStringString, StrVal: s}
}

// IsString reports whether x holds a string. A nil x holds the number 0.
func (x *IntOrString) IsString() bool {
	return x.GetType() == IntOrStringString
}

// Text renders x as Kubernetes prints it: the number or the string.
func (x *IntOrString) Text() string {
	if x.IsString() {
		return x.GetStrVal()
	}
	return strconv.Itoa(int(x.GetIntVal()))
}
