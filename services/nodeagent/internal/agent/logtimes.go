package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/kplane/kplane/services/nodeagent/internal/shim"
)

// timesFileName is the container's times file, next to its log: the
// shim appends the offset and time of every line start (shim.TimeRecord).
const timesFileName = "container.times"

// rfc3339NanoFixed is how timestamps=true prefixes each line: UTC with
// all nine fraction digits, so the prefixes line up.
const rfc3339NanoFixed = "2006-01-02T15:04:05.000000000Z07:00"

// errNoLineTimes is returned when a log was written without a times file
// (a run started by a node agent from before times were kept).
var errNoLineTimes = errors.New("this container's log was written without per-line times, so sinceSeconds, sinceTime and timestamps cannot be served for it")

// lineTimes reads a times file. Records are appended in log order, so
// both their offsets and (the wall clock permitting) their times rise:
// lookups are binary searches with one ReadAt per probe.
type lineTimes struct {
	f *os.File
}

func openLineTimes(dir string) (*lineTimes, error) {
	f, err := os.Open(filepath.Join(dir, timesFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoLineTimes
	}
	if err != nil {
		return nil, fmt.Errorf("open the log's times: %w", err)
	}
	return &lineTimes{f: f}, nil
}

func (t *lineTimes) close() { _ = t.f.Close() } // read-only

// count is the number of whole records written so far.
func (t *lineTimes) count() (int64, error) {
	fi, err := t.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat the log's times: %w", err)
	}
	return fi.Size() / shim.TimeRecordSize, nil
}

func (t *lineTimes) at(i int64) (shim.TimeRecord, error) {
	var b [shim.TimeRecordSize]byte
	if _, err := t.f.ReadAt(b[:], i*shim.TimeRecordSize); err != nil {
		return shim.TimeRecord{}, fmt.Errorf("read the log's times: %w", err)
	}
	return shim.DecodeTimeRecord(b[:]), nil
}

// search is the first of n records for which f holds (n when none).
func (t *lineTimes) search(n int64, f func(shim.TimeRecord) bool) (int64, error) {
	var ferr error
	i := sort.Search(int(n), func(i int) bool {
		if ferr != nil {
			return true
		}
		r, err := t.at(int64(i))
		if err != nil {
			ferr = err
			return true
		}
		return f(r)
	})
	return int64(i), ferr
}

// firstSince is the offset of the first line at or after offset from
// whose time is not before since; ok is false while there is none yet.
func (t *lineTimes) firstSince(since time.Time, from int64) (off int64, ok bool, err error) {
	n, err := t.count()
	if err != nil {
		return 0, false, err
	}
	byTime, err := t.search(n, func(r shim.TimeRecord) bool { return !r.Time.Before(since) })
	if err != nil {
		return 0, false, err
	}
	byOff, err := t.search(n, func(r shim.TimeRecord) bool { return r.Offset >= from })
	if err != nil {
		return 0, false, err
	}
	i := max(byTime, byOff)
	if i >= n {
		return 0, false, nil
	}
	r, err := t.at(i)
	return r.Offset, err == nil, err
}

// timeAt is the time of the line starting at off: the record of the
// last line start at or before it.
func (t *lineTimes) timeAt(off int64) (time.Time, error) {
	n, err := t.count()
	if err != nil {
		return time.Time{}, err
	}
	i, err := t.search(n, func(r shim.TimeRecord) bool { return r.Offset > off })
	if err != nil {
		return time.Time{}, err
	}
	if i == 0 {
		if n == 0 {
			return time.Time{}, errNoLineTimes
		}
		i = 1 // before the first record: take the first
	}
	r, err := t.at(i - 1)
	return r.Time, err
}

// stampWriter prefixes every line it passes on with the line's time
// (timestamps=true). off is the log offset of the next byte; the first
// byte starts a line.
type stampWriter struct {
	w       io.Writer
	times   *lineTimes
	off     int64
	midLine bool
}

func (s *stampWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if !s.midLine {
			t, err := s.times.timeAt(s.off)
			if err != nil {
				return written, err
			}
			if _, err := io.WriteString(s.w, t.UTC().Format(rfc3339NanoFixed)+" "); err != nil {
				return written, err
			}
			s.midLine = true
		}
		chunk := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			chunk = p[:i+1]
		}
		n, err := s.w.Write(chunk)
		written += n
		s.off += int64(n)
		if err != nil {
			return written, err
		}
		if chunk[len(chunk)-1] == '\n' {
			s.midLine = false
		}
		p = p[len(chunk):]
	}
	return written, nil
}

// Flush passes a flush on, so followers still see each line at once.
func (s *stampWriter) Flush() {
	if f, ok := s.w.(interface{ Flush() }); ok {
		f.Flush()
	}
}
