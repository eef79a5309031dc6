package health

import (
	"flag"
	"net"
	"strconv"
)

// Profiling is the --enable-profiling flag. Unset, it follows the health
// address: on when that is a loopback address (only local users reach the
// profiles), off when it listens on other interfaces. Set, it wins.
type Profiling struct {
	set, on bool
}

// AddFlag registers --enable-profiling on fs.
func (p *Profiling) AddFlag(fs *flag.FlagSet) {
	fs.Var(p, "enable-profiling", "serve Go profiles under /debug/pprof/ on --health-addr (default: on when --health-addr is a loopback address, off otherwise)")
}

// Enabled reports whether profiles are served on the health address addr.
func (p *Profiling) Enabled(addr string) bool {
	if p.set {
		return p.on
	}
	return IsLoopback(addr)
}

// String implements flag.Value.
func (p *Profiling) String() string {
	if p == nil || !p.set {
		return "auto"
	}
	return strconv.FormatBool(p.on)
}

// Set implements flag.Value.
func (p *Profiling) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	p.set, p.on = true, v
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (p *Profiling) IsBoolFlag() bool { return true }

// IsLoopback reports whether addr ("host:port") listens on a loopback
// address only. An empty host (":10252") means every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
