package agent

import (
	"io"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSeekTail(t *testing.T) {
	long := strings.Repeat("x", 20<<10) + "\n"
	for _, c := range []struct {
		log  string
		n    int64
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 0, ""},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"", 3, ""},
		{long + long + "end\n", 2, long + "end\n"},
	} {
		r := strings.NewReader(c.log)
		if err := seekTail(r, c.n); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("tail %d of %.20q: got %.20q (%d bytes), want %.20q (%d bytes)", c.n, c.log, got, len(got), c.want, len(c.want))
		}
	}
}

func TestParseLogOptions(t *testing.T) {
	opts, limit, err := parseLogOptions(url.Values{"follow": {"true"}, "tailLines": {"5"}, "limitBytes": {"100"}, "timestamps": {"false"}, "previous": {"true"}})
	if err != nil || !opts.Follow || opts.TailLines != 5 || limit != 100 || !opts.Previous || opts.Timestamps || !opts.Since.IsZero() {
		t.Fatalf("got %+v %d %v", opts, limit, err)
	}
	opts, limit, err = parseLogOptions(url.Values{})
	if err != nil || opts.Follow || opts.TailLines != -1 || limit != -1 {
		t.Fatalf("defaults: got %+v %d %v", opts, limit, err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opts, _, err = parseLogOptionsAt(url.Values{"sinceSeconds": {"10"}, "timestamps": {"true"}}, now)
	if err != nil || !opts.Since.Equal(now.Add(-10*time.Second)) || !opts.Timestamps {
		t.Fatalf("sinceSeconds=10: got %+v %v", opts, err)
	}
	opts, _, err = parseLogOptionsAt(url.Values{"sinceTime": {"2026-01-01T00:00:00.5Z"}}, now)
	if err != nil || !opts.Since.Equal(time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC)) {
		t.Fatalf("sinceTime: got %+v %v", opts, err)
	}
	for q, field := range map[string]string{
		"tailLines=-1": "tailLines", "tailLines=x": "tailLines", "limitBytes=0": "limitBytes",
		"follow=maybe": "follow", "sinceSeconds=0": "sinceSeconds", "sinceSeconds=-3": "sinceSeconds", "timestamps=yes": "timestamps",
		"previous=yes": "previous", "sinceTime=yesterday": "sinceTime",
		"sinceTime=2026-01-01T00:00:00Z&sinceSeconds=5": "sinceSeconds: Forbidden",
	} {
		v, _ := url.ParseQuery(q)
		if _, _, err := parseLogOptions(v); err == nil || !strings.HasPrefix(err.Error(), field+":") {
			t.Errorf("%s: got %v, want an error naming %s", q, err, field)
		}
	}
}
