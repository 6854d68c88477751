package cli

import (
	"testing"
	"time"

	"openxet/work"
)

// TestWorkSettings: the work slot keys default to work's own defaults and
// reach the server's configuration.
func TestWorkSettings(t *testing.T) {
	c, err := LoadConfig("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := serverConfig(c, nil).Work
	want := work.Config{Slots: work.DefaultSlots, TenantShare: work.DefaultTenantShare, Wait: work.DefaultWait}
	if got != want {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	c, err = LoadConfig("", nil, map[string]string{"server.work_slots": "16", "server.tenant_work_share": "0.5", "server.work_wait": "3s"})
	if err != nil {
		t.Fatal(err)
	}
	got = serverConfig(c, nil).Work
	want = work.Config{Slots: 16, TenantShare: 0.5, Wait: 3 * time.Second}
	if got != want {
		t.Errorf("set: %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the server refuses what the cli accepted: %v", err)
	}
}
