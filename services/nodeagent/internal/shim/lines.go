package shim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// TimeRecordSize is the size of one record of a times file: the log
// offset where a line starts and the time the shim read it (Unix
// nanoseconds), both little-endian int64.
const TimeRecordSize = 16

// TimeRecord is one line start of a times file.
type TimeRecord struct {
	Offset int64
	Time   time.Time
}

// DecodeTimeRecord reads the record in b (TimeRecordSize bytes).
func DecodeTimeRecord(b []byte) TimeRecord {
	return TimeRecord{
		Offset: int64(binary.LittleEndian.Uint64(b[:8])),
		Time:   time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:16]))),
	}
}

// lineTimer appends what the container prints to the log and, before
// the bytes, a record per line start to the times file, so a reader that
// sees a line in the log always finds its time. The log itself stays the
// container's bytes unchanged.
type lineTimer struct {
	mu         sync.Mutex // the copy and the shim's own notes write
	log, times *os.File
	off        int64 // the log's size: the offset of the next byte
	atStart    bool  // the next byte starts a line
	now        func() time.Time
}

// newLineTimer appends to log and times from the log's current end; the
// first byte written starts a line (a run's log starts on a line of its
// own even when the previous run's last line had no newline).
func newLineTimer(log, times *os.File) (*lineTimer, error) {
	fi, err := log.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat log: %w", err)
	}
	return &lineTimer{log: log, times: times, off: fi.Size(), atStart: true, now: time.Now}, nil
}

// Write records the line starts in p, then appends p to the log.
func (l *lineTimer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var recs []byte
	now := uint64(l.now().UnixNano())
	for i, c := range p {
		if l.atStart {
			recs = binary.LittleEndian.AppendUint64(recs, uint64(l.off+int64(i)))
			recs = binary.LittleEndian.AppendUint64(recs, now)
		}
		l.atStart = c == '\n'
	}
	if len(recs) > 0 {
		if _, err := l.times.Write(recs); err != nil {
			return 0, fmt.Errorf("write times: %w", err)
		}
	}
	n, err := l.log.Write(p)
	l.off += int64(n)
	if err != nil {
		return n, fmt.Errorf("write log: %w", err)
	}
	return n, nil
}

// drainBound is how long the shim keeps copying after the container
// exited, for output a background child still writes; it then stops so
// that the exit is recorded.
const drainBound = 2 * time.Second

// copyLines copies r to lt until r ends (every writer closed) or a read
// deadline set on r passes.
func copyLines(lt *lineTimer, r *os.File) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := lt.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded):
			return nil
		default:
			return fmt.Errorf("read the container's output: %w", err)
		}
	}
}
