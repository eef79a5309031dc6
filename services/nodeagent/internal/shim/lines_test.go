package shim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A record is written for every line start, including the one a chunk
// boundary leaves at the start of the next chunk, with the log's offset
// (counted from what the log already held) and the time of the read.
func TestLineTimerRecordsLineStarts(t *testing.T) {
	dir := t.TempDir()
	logPath, timesPath := filepath.Join(dir, "log"), filepath.Join(dir, "times")
	if err := os.WriteFile(logPath, []byte("old run, no newline"), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	timesf, err := os.OpenFile(timesPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close(); _ = timesf.Close() }()
	lt, err := newLineTimer(logf, timesf)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(100, 0)
	lt.now = func() time.Time { return clock }
	for _, chunk := range []string{"a\nbb", "b\n", "\nc\nd"} {
		if _, err := lt.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Second)
	}
	log, _ := os.ReadFile(logPath)
	if string(log) != "old run, no newlinea\nbbb\n\nc\nd" {
		t.Fatalf("log = %q", log)
	}
	raw, _ := os.ReadFile(timesPath)
	var got []TimeRecord
	for i := 0; i+TimeRecordSize <= len(raw); i += TimeRecordSize {
		got = append(got, DecodeTimeRecord(raw[i:]))
	}
	base := int64(len("old run, no newline"))
	want := []TimeRecord{{base, time.Unix(100, 0)}, {base + 2, time.Unix(100, 0)}, {base + 6, time.Unix(102, 0)}, {base + 7, time.Unix(102, 0)}, {base + 9, time.Unix(102, 0)}}
	if len(got) != len(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || !got[i].Time.Equal(want[i].Time) {
			t.Errorf("record %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// The shim run through a pipe: the container's output reaches the log
// unchanged, a line per record, and a background child holding the pipe
// does not keep the exit from being recorded.
func TestRunWithTimesFile(t *testing.T) {
	dir := t.TempDir()
	logPath, timesPath := filepath.Join(dir, "log"), filepath.Join(dir, "times")
	info := run([]string{"sh", "-c", "echo one; echo two >&2; printf three; sleep 60 & echo $! > bg.pid; exit 3"}, dir, logPath, timesPath, filepath.Join(dir, "pid"))
	if b, err := os.ReadFile(filepath.Join(dir, "bg.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if info.ExitCode != 3 {
		t.Fatalf("exit %+v", info)
	}
	log, _ := os.ReadFile(logPath)
	if string(log) != "one\ntwo\nthree" {
		t.Fatalf("log = %q", log)
	}
	fi, err := os.Stat(timesPath)
	if err != nil || fi.Size() != 3*TimeRecordSize {
		t.Fatalf("times file: %v %v, want 3 records", fi, err)
	}
}
