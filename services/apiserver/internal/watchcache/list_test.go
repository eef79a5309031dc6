package watchcache

import (
	"fmt"
	"testing"
	"time"
)

func snapshotOf(keys ...string) *ListSnapshot {
	s := &ListSnapshot{Rev: 7}
	for _, k := range keys {
		s.Entries = append(s.Entries, Entry{Key: k})
	}
	return s
}

func TestListSnapshotPage(t *testing.T) {
	s := snapshotOf("a/1", "a/2", "b/1", "b/2", "c/1")
	for _, tc := range []struct {
		start     string
		limit     int64
		want      string
		remaining int
	}{
		{"", 0, "a/1 a/2 b/1 b/2 c/1", 0},
		{"", 2, "a/1 a/2", 3},
		{"a/2\x00", 2, "b/1 b/2", 1},
		{"b/2\x00", 2, "c/1", 0},
		{"c/1\x00", 2, "", 0},
		{"b/", 10, "b/1 b/2 c/1", 0},
	} {
		page, remaining := s.Page(tc.start, tc.limit)
		got := ""
		for i, e := range page {
			if i > 0 {
				got += " "
			}
			got += e.Key
		}
		if got != tc.want || remaining != tc.remaining {
			t.Errorf("Page(%q, %d) = [%s] and %d left, want [%s] and %d", tc.start, tc.limit, got, remaining, tc.want, tc.remaining)
		}
	}
}

func TestSnapshotsExpireAndEvict(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewSnapshots(30*time.Second, 3)
	for i := range 3 {
		s.Put(fmt.Sprint(i), snapshotOf(), now.Add(time.Duration(i)*time.Second))
	}
	// Using 0 makes 1 the least recently used, so a fourth evicts 1.
	if _, ok := s.Get("0", now.Add(5*time.Second)); !ok {
		t.Fatal("snapshot 0 should be kept")
	}
	s.Put("3", snapshotOf(), now.Add(6*time.Second))
	if _, ok := s.Get("1", now.Add(6*time.Second)); ok {
		t.Error("snapshot 1, least recently used, should have been evicted")
	}
	if s.Len() != 3 {
		t.Errorf("%d snapshots kept, want 3", s.Len())
	}
	// 30 s after its last use a snapshot is gone.
	if _, ok := s.Get("3", now.Add(36*time.Second)); !ok {
		t.Error("snapshot 3 should still be kept 30 s after its last use")
	}
	if _, ok := s.Get("2", now.Add(36*time.Second)); ok {
		t.Error("snapshot 2 should have expired")
	}
	s.Drop("3")
	if _, ok := s.Get("3", now.Add(37*time.Second)); ok {
		t.Error("a dropped snapshot should be gone")
	}
}
