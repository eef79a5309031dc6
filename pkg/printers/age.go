package printers

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// HumanDuration renders a duration the compact way kubectl's AGE column
// does: precise while it is short, coarser as it grows ("45s", "3m20s",
// "2h", "5d3h", "400d", "3y20d").
func HumanDuration(d time.Duration) string {
	if d < -time.Second {
		return "<invalid>"
	}
	if d < 0 {
		return "0s"
	}
	secs := int64(d / time.Second)
	mins := secs / 60
	hours := mins / 60
	days := hours / 24
	switch {
	case secs < 120:
		return fmt.Sprintf("%ds", secs)
	case mins < 10:
		return withRest(mins, "m", secs%60, "s")
	case mins < 180:
		return fmt.Sprintf("%dm", mins)
	case hours < 8:
		return withRest(hours, "h", mins%60, "m")
	case hours < 48:
		return fmt.Sprintf("%dh", hours)
	case hours < 24*8:
		return withRest(days, "d", hours%24, "h")
	case days < 365*2:
		return fmt.Sprintf("%dd", days)
	case days < 365*8:
		return withRest(days/365, "y", days%365, "d")
	default:
		return fmt.Sprintf("%dy", days/365)
	}
}

// withRest prints "<big><unit>" followed by the remainder unless it is zero.
func withRest(big int64, unit string, rest int64, restUnit string) string {
	if rest == 0 {
		return fmt.Sprintf("%d%s", big, unit)
	}
	return fmt.Sprintf("%d%s%d%s", big, unit, rest, restUnit)
}

// Age renders how long ago ts was, or "<unknown>" when it is unset.
func Age(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "<unknown>"
	}
	return HumanDuration(now.Sub(ts.AsTime()))
}
