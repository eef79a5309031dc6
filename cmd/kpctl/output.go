package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// output is a writer that remembers its first error, as bufio.Writer does:
// a command prints line after line without checking each one, and run
// checks once at the end whether everything reached stdout (a closed pipe
// or a full disk must not end in exit status 0).
type output struct {
	w   io.Writer
	err error
}

func newOutput(w io.Writer) *output { return &output{w: w} }

// newColumns returns an output whose tab-separated cells are aligned in
// columns; flush writes them to w.
func newColumns(w io.Writer) *output {
	return &output{w: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
}

// Write writes p, or returns the first error without writing once a write
// has failed.
func (o *output) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// The print methods drop the error fmt returns: it is the one Write kept.

func (o *output) printf(format string, args ...any) { _, _ = fmt.Fprintf(o, format, args...) }
func (o *output) print(args ...any)                 { _, _ = fmt.Fprint(o, args...) }
func (o *output) println(args ...any)               { _, _ = fmt.Fprintln(o, args...) }

// flush flushes an output from newColumns and returns the first error of
// the output so far.
func (o *output) flush() error {
	if f, ok := o.w.(interface{ Flush() error }); ok && o.err == nil {
		o.err = f.Flush()
	}
	return o.err
}
