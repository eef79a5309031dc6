// Package atomicfile replaces files so that a reader, or a process
// restarted after a crash, sees the old content or the new one, never a
// partial write.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with b (mode perm): it writes a temporary file in
// the same directory, flushes it to disk, renames it over path and flushes
// the directory, so the rename itself survives a crash.
func WriteFile(path string, b []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp) // the write already failed; this only tidies up
		}
	}()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(tmp, perm)); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: open dir: %w", err)
	}
	serr = d.Sync()
	cerr = d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("atomicfile: sync dir %s: %w", dir, err)
	}
	return nil
}
