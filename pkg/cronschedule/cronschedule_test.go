package cronschedule

import (
	"testing"
	"time"
)

func mustParse(t *testing.T, s, tz string) *Schedule {
	t.Helper()
	sc, err := Parse(s, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", s, tz, err)
	}
	return sc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ sched, tz, want string }{
		{"* * * *", "", "expected exactly 5 fields, found 4: [* * * *]"},
		{"61 * * * *", "", "end of range (61) above maximum (59): 61"},
		{"@fortnightly", "", "unrecognized descriptor: @fortnightly"},
		{"CRON_TZ=UTC * * * * *", "", "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"},
		{"* * * * *", "Mars/Olympus", "unknown time zone Mars/Olympus"},
		{"* * * * *", "local", "must be an explicit time zone as defined in https://www.iana.org/time-zones"},
	} {
		_, err := Parse(c.sched, c.tz)
		if err == nil || err.Error() != c.want {
			t.Errorf("Parse(%q, %q) = %v, want %q", c.sched, c.tz, err, c.want)
		}
	}
	for _, ok := range []string{"@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@every 5m", "*/5 1-3 * JAN MON-FRI"} {
		if _, err := Parse(ok, "UTC"); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}

func TestNextInTimeZone(t *testing.T) {
	s := mustParse(t, "0 9 * * *", "Asia/Tokyo")
	// 09:00 in Tokyo is 00:00 UTC.
	if got, want := s.Next(utc("2026-01-10T12:00:00Z")), utc("2026-01-11T00:00:00Z"); !got.Equal(want) {
		t.Errorf("Next = %v, want %v", got, want)
	}
	// Hourly ignores the zone's offset within the hour.
	h := mustParse(t, "@hourly", "Asia/Kolkata") // UTC+05:30
	if got, want := h.Next(utc("2026-01-10T12:10:00Z")), utc("2026-01-10T12:30:00Z"); !got.Equal(want) {
		t.Errorf("hourly in +05:30: Next = %v, want %v", got, want)
	}
}

func TestDaylightSavingTime(t *testing.T) {
	// Europe/Berlin springs forward on 2026-03-29 at 02:00 (to 03:00) and
	// falls back on 2026-10-25 at 03:00 (to 02:00).
	s := mustParse(t, "30 2 * * *", "Europe/Berlin")
	// 02:30 does not exist on the spring day: the run that day is skipped
	// by robfig/cron, next is 02:30 CEST on the 30th (00:30 UTC).
	got := s.Next(utc("2026-03-28T02:00:00Z"))
	if want := utc("2026-03-30T00:30:00Z"); !got.Equal(want) {
		t.Errorf("spring forward: Next = %v, want %v", got, want)
	}
	// 02:30 exists twice on the autumn day, and robfig/cron (as
	// Kubernetes, which uses it) runs at both: 00:30 and 01:30 UTC.
	m := s.MostRecent(utc("2026-10-24T12:00:00Z"), utc("2026-10-25T12:00:00Z"))
	if m.Count != 2 || !m.Time.Equal(utc("2026-10-25T01:30:00Z")) {
		t.Errorf("fall back: %d runs on the day, latest %v; want 2, 01:30 UTC", m.Count, m.Time)
	}
	// An hourly schedule has 23 runs on the spring day and 25 on the autumn day.
	h := mustParse(t, "0 * * * *", "Europe/Berlin")
	if m := h.MostRecent(utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z")); m.Count != 23 {
		t.Errorf("spring day hourly runs = %d, want 23", m.Count)
	}
	if m := h.MostRecent(utc("2026-10-24T22:00:00Z"), utc("2026-10-25T23:00:00Z")); m.Count != 25 {
		t.Errorf("autumn day hourly runs = %d, want 25", m.Count)
	}
}

func TestMostRecent(t *testing.T) {
	s := mustParse(t, "*/10 * * * *", "UTC")
	since := utc("2026-01-01T10:00:00Z")
	for _, c := range []struct {
		now   string
		count int
		last  string
	}{
		{"2026-01-01T10:09:59Z", 0, ""},
		{"2026-01-01T10:10:00Z", 1, "2026-01-01T10:10:00Z"},
		{"2026-01-01T10:35:00Z", 3, "2026-01-01T10:30:00Z"},
		// 100 missed runs exactly: counted, not too many.
		{"2026-01-02T02:40:00Z", 100, "2026-01-02T02:40:00Z"},
		// A year of downtime: 101 counted, the latest run still found.
		{"2027-01-01T10:07:00Z", 101, "2027-01-01T10:00:00Z"},
	} {
		m := s.MostRecent(since, utc(c.now))
		if m.Count != c.count {
			t.Errorf("now %s: count %d, want %d", c.now, m.Count, c.count)
		}
		var want time.Time
		if c.last != "" {
			want = utc(c.last)
		}
		if !m.Time.Equal(want) {
			t.Errorf("now %s: latest %v, want %v", c.now, m.Time, want)
		}
		if m.TooMany() != (c.count > TooManyMissed) {
			t.Errorf("now %s: TooMany = %v", c.now, m.TooMany())
		}
	}
	// A schedule that never fires (30 February) finds nothing.
	never := mustParse(t, "0 0 30 2 *", "UTC")
	if m := never.MostRecent(since, utc("2027-01-01T00:00:00Z")); m.Count != 0 || !m.Time.IsZero() {
		t.Errorf("30 Feb: %+v", m)
	}
	// A sparse schedule found after a long gap: yearly, 150 years missed
	// would be too many to count one by one only if more than 100.
	y := mustParse(t, "@yearly", "UTC")
	if m := y.MostRecent(utc("1900-06-01T00:00:00Z"), utc("2026-06-01T00:00:00Z")); !m.TooMany() || !m.Time.Equal(utc("2026-01-01T00:00:00Z")) {
		t.Errorf("yearly after 126 years: %+v", m)
	}
}

// BenchmarkMostRecent prints the cost of finding the run to start after a
// short and a year-long downtime of an every-minute schedule (525,600
// missed runs, which a plain forward count would step through one by one).
func BenchmarkMostRecent(b *testing.B) {
	s, err := Parse("* * * * *", "UTC")
	if err != nil {
		b.Fatal(err)
	}
	since := utc("2026-01-01T00:00:00Z")
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"1h", time.Hour}, {"1y", 365 * 24 * time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			now := since.Add(c.gap).Add(30 * time.Second)
			for b.Loop() {
				if m := s.MostRecent(since, now); m.Time.IsZero() {
					b.Fatal("no run found")
				}
			}
		})
	}
}
