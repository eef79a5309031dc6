// Package logging builds the hclog logger of every kplane binary from
// the shared --log-level and --log-format flags.
package logging

import (
	"flag"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
)

// Options are the logging flags.
type Options struct {
	Level  string
	Format string
}

// AddFlags registers --log-level and --log-format.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Level, "log-level", "info", "log level: trace, debug, info, warn or error")
	fs.StringVar(&o.Format, "log-format", "text", "log format: text or json")
}

// Validate reports a bad flag value, naming the flag.
func (o *Options) Validate() error {
	if o.Format != "text" && o.Format != "json" {
		return fmt.Errorf("--log-format must be text or json, not %q", o.Format)
	}
	if hclog.LevelFromString(o.Level) == hclog.NoLevel {
		return fmt.Errorf("--log-level %q is not one of trace, debug, info, warn, error", o.Level)
	}
	return nil
}

// New returns a logger named name writing to out.
func (o *Options) New(name string, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.LevelFromString(o.Level),
		JSONFormat: o.Format == "json",
		Output:     out,
	})
}
