package validation

import (
	"fmt"
	"net/netip"
	"strings"
)

// Length limits shared by the format checks, as in Kubernetes.
const (
	// DNS1123LabelMaxLength bounds a DNS label (RFC 1123).
	DNS1123LabelMaxLength = 63
	// DNS1123SubdomainMaxLength bounds a DNS subdomain (RFC 1123).
	DNS1123SubdomainMaxLength = 253
	// QualifiedNameMaxLength bounds the name part of a qualified name.
	QualifiedNameMaxLength = 63
	// LabelValueMaxLength bounds a label value.
	LabelValueMaxLength = 63
	// IANASvcNameMaxLength bounds a named port.
	IANASvcNameMaxLength = 15
)

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }
func isLower(c byte) bool      { return c >= 'a' && c <= 'z' }

func maxLenMsg(n int) string { return fmt.Sprintf("must be no more than %d characters", n) }

// IsDNS1123Label checks an RFC 1123 label: at most 63 characters of
// lowercase letters, digits and '-', starting and ending with a letter or
// digit. It returns one message per problem; none means valid.
func IsDNS1123Label(s string) []string {
	var msgs []string
	if len(s) > DNS1123LabelMaxLength {
		msgs = append(msgs, maxLenMsg(DNS1123LabelMaxLength))
	}
	if !isDNSLabelChars(s) {
		msgs = append(msgs, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "+
			"and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')")
	}
	return msgs
}

func isDNSLabelChars(s string) bool {
	if s == "" || !isLowerAlnum(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// IsDNS1035Label checks an RFC 1035 label (service names): like a DNS-1123
// label but starting with a letter.
func IsDNS1035Label(s string) []string {
	var msgs []string
	if len(s) > DNS1123LabelMaxLength {
		msgs = append(msgs, maxLenMsg(DNS1123LabelMaxLength))
	}
	if !isDNSLabelChars(s) || !isLower(s[0]) {
		msgs = append(msgs, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "+
			"start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name' or 'abc-123')")
	}
	return msgs
}

// IsDNS1123Subdomain checks an RFC 1123 subdomain: at most 253 characters,
// dot-separated DNS labels.
func IsDNS1123Subdomain(s string) []string {
	var msgs []string
	if len(s) > DNS1123SubdomainMaxLength {
		msgs = append(msgs, maxLenMsg(DNS1123SubdomainMaxLength))
	}
	ok := s != ""
	for _, part := range strings.Split(s, ".") {
		if !isDNSLabelChars(part) {
			ok = false
			break
		}
	}
	if !ok {
		msgs = append(msgs, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "+
			"and must start and end with an alphanumeric character (e.g. 'example.com')")
	}
	return msgs
}

// isNameChars reports whether s is a non-empty run of [A-Za-z0-9-_.] with
// alphanumeric ends: the shape of a label value and of a qualified name's
// name part.
func isNameChars(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// IsQualifiedName checks a label or annotation key: an optional DNS-1123
// subdomain prefix and '/', then a name of at most 63 characters from
// [A-Za-z0-9-_.] starting and ending with an alphanumeric character.
func IsQualifiedName(s string) []string {
	var msgs []string
	name := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		prefix := s[:i]
		name = s[i+1:]
		if prefix == "" {
			msgs = append(msgs, "prefix part must be non-empty")
		} else {
			for _, m := range IsDNS1123Subdomain(prefix) {
				msgs = append(msgs, "prefix part "+m)
			}
		}
		if strings.IndexByte(name, '/') >= 0 {
			return append(msgs, "a qualified name may contain at most one '/'")
		}
	}
	switch {
	case name == "":
		msgs = append(msgs, "name part must be non-empty")
	case len(name) > QualifiedNameMaxLength:
		msgs = append(msgs, "name part "+maxLenMsg(QualifiedNameMaxLength))
	}
	if name != "" && !isNameChars(name) {
		msgs = append(msgs, "name part must consist of alphanumeric characters, '-', '_' or '.', "+
			"and must start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc'), "+
			"with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
	}
	return msgs
}

// IsValidLabelValue checks a label value: empty, or at most 63 characters
// from [A-Za-z0-9-_.] starting and ending with an alphanumeric character.
func IsValidLabelValue(s string) []string {
	if s == "" {
		return nil
	}
	var msgs []string
	if len(s) > LabelValueMaxLength {
		msgs = append(msgs, maxLenMsg(LabelValueMaxLength))
	}
	if !isNameChars(s) {
		msgs = append(msgs, "a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "+
			"and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')")
	}
	return msgs
}

// IsEnvVarName checks an environment variable name: letters, digits, '_',
// '-' and '.', not starting with a digit, and not "." or "..".
func IsEnvVarName(s string) []string {
	ok := s != "" && s != "." && s != ".." && (s[0] < '0' || s[0] > '9')
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = isAlnum(c) || c == '_' || c == '-' || c == '.'
	}
	if !ok {
		return []string{"a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', " +
			"and must not start with a digit (e.g. 'my.env-name' or 'MY_ENV.NAME')"}
	}
	return nil
}

// IsConfigKey checks a key of a Secret's data: at most 253 characters of
// [-._a-zA-Z0-9], and not "." or "..".
func IsConfigKey(s string) []string {
	var msgs []string
	if len(s) > DNS1123SubdomainMaxLength {
		msgs = append(msgs, maxLenMsg(DNS1123SubdomainMaxLength))
	}
	ok := s != "" && s != "." && s != ".."
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = isAlnum(c) || c == '_' || c == '-' || c == '.'
	}
	if !ok {
		msgs = append(msgs, "a valid config key must consist of alphanumeric characters, '-', '_' or '.', and must not be '.' or '..'")
	}
	return msgs
}

// IsIANASvcName checks a port name: at most 15 lowercase letters, digits and
// '-', with at least one letter, no leading, trailing or doubled '-'.
func IsIANASvcName(s string) []string {
	var msgs []string
	if len(s) > IANASvcNameMaxLength {
		msgs = append(msgs, maxLenMsg(IANASvcNameMaxLength))
	}
	letter := false
	ok := s != "" && s[0] != '-' && s[len(s)-1] != '-' && !strings.Contains(s, "--")
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		letter = letter || isLower(c)
		ok = isLowerAlnum(c) || c == '-'
	}
	if !ok || !letter {
		msgs = append(msgs, "a port name must consist of lower case alphanumeric characters or '-', contain at least one letter, "+
			"and must not start or end with '-' or contain '--' (e.g. 'http' or 'web-80')")
	}
	return msgs
}

// IsValidPortNum checks a port number in 1..65535.
func IsValidPortNum(p int32) []string {
	if p < 1 || p > 65535 {
		return []string{"must be between 1 and 65535, inclusive"}
	}
	return nil
}

// IsValidIP checks an IPv4 or IPv6 address.
func IsValidIP(s string) []string {
	if _, err := netip.ParseAddr(s); err != nil || strings.Contains(s, "%") {
		return []string{"must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)"}
	}
	return nil
}

// IsValidCIDR checks an IPv4 or IPv6 prefix in CIDR notation.
func IsValidCIDR(s string) []string {
	if _, err := netip.ParsePrefix(s); err != nil {
		return []string{"must be a valid CIDR value (e.g. 10.9.8.0/24 or 2001:db8::/64)"}
	}
	return nil
}

// IsHTTPHeaderName checks a header name a probe or hook sends: one or more
// letters, digits and '-'.
func IsHTTPHeaderName(s string) []string {
	ok := s != ""
	for i := 0; i < len(s) && ok; i++ {
		ok = isAlnum(s[i]) || s[i] == '-'
	}
	if !ok {
		return []string{"an HTTP header name must consist of letters, digits or '-' (e.g. 'X-Header-Name')"}
	}
	return nil
}
