package logging

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

func TestFlagsAndValidation(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--log-level", "debug", "--log-format", "json"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("valid flags rejected: %v", err)
	}
	var buf bytes.Buffer
	o.New("svc", &buf).Debug("hello", "key", "value")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("json format did not write JSON: %q: %v", buf.String(), err)
	}
	if line["key"] != "value" || line["@module"] != "svc" {
		t.Fatalf("unexpected log line %v", line)
	}

	for _, bad := range []Options{{Level: "loud", Format: "text"}, {Level: "info", Format: "xml"}} {
		err := bad.Validate()
		if err == nil {
			t.Fatalf("%+v accepted", bad)
		}
		if !strings.Contains(err.Error(), "--log-") {
			t.Fatalf("error %q does not name the flag", err)
		}
	}
}
