// Package cronschedule parses CronJob schedules and finds the run times a
// CronJob controller must act on: the most recent time a schedule fired
// since a point (a missed run) and the next one.
//
// Schedules are robfig/cron/v3's standard syntax: five fields (minute,
// hour, day of month, month, day of week) or a descriptor (@yearly,
// @monthly, @weekly, @daily, @hourly, @every <duration>), interpreted in a
// CronJob's timeZone.
package cronschedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// Time zones must load in FROM-scratch images, which have no
	// /usr/share/zoneinfo: embed the database.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// TooManyMissed is the number of missed runs beyond which a controller
// reports that it stopped counting (Kubernetes' TooManyMissedTimes).
const TooManyMissed = 100

// Schedule is a parsed schedule in its time zone.
type Schedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// LoadLocation returns the time zone a CronJob's timeZone names; "" is the
// process's local zone. "Local" is refused: it would mean different times
// on different machines.
func LoadLocation(tz string) (*time.Location, error) {
	if tz == "" {
		return time.Local, nil
	}
	if strings.EqualFold(tz, "Local") {
		return nil, errors.New("must be an explicit time zone as defined in https://www.iana.org/time-zones")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %s", tz)
	}
	return loc, nil
}

// Parse parses schedule in the time zone tz ("" = local). A TZ= or
// CRON_TZ= prefix in the schedule is refused: the zone belongs in
// timeZone, where it is validated.
func Parse(schedule, tz string) (*Schedule, error) {
	if strings.Contains(schedule, "TZ") {
		return nil, errors.New("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
	}
	loc, err := LoadLocation(tz)
	if err != nil {
		return nil, err
	}
	s, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, err
	}
	return &Schedule{sched: s, loc: loc}, nil
}

// Next returns the first run strictly after t, in the schedule's zone.
func (s *Schedule) Next(t time.Time) time.Time {
	return s.sched.Next(t.In(s.loc))
}

// In returns t in the schedule's time zone.
func (s *Schedule) In(t time.Time) time.Time { return t.In(s.loc) }

// Missed is the result of MostRecent.
type Missed struct {
	// Time is the latest run in (since, now]; zero when none.
	Time time.Time
	// Count is the number of runs in (since, now], counted up to
	// TooManyMissed+1.
	Count int
}

// TooMany reports whether more than TooManyMissed runs were missed.
func (m Missed) TooMany() bool { return m.Count > TooManyMissed }

// MostRecent finds the runs after since and at or before now. However long
// the gap, the work is bounded: it counts at most TooManyMissed+1 runs
// forwards, and beyond that finds the latest run by searching back from
// now over doubling windows.
func (s *Schedule) MostRecent(since, now time.Time) Missed {
	var m Missed
	for t := s.Next(since); !t.IsZero() && !t.After(now); t = s.Next(t) {
		m.Time = t
		m.Count++
		if m.Count > TooManyMissed {
			m.Time = s.latestBefore(since, now)
			break
		}
	}
	return m
}

// latestBefore returns the last run in (since, now], knowing there is one.
func (s *Schedule) latestBefore(since, now time.Time) time.Time {
	for w := time.Minute; ; w *= 2 {
		from := now.Add(-w)
		if !from.After(since) {
			from = since
		}
		var last time.Time
		for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
			last = t
		}
		if !last.IsZero() || from.Equal(since) {
			return last
		}
	}
}
