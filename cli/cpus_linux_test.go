//go:build linux

package cli

import (
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoadAbuserYieldsTheCPU starts the abuser's process as `openxet load`
// does and checks that it says it runs at SCHED_IDLE and that every one of
// its threads does, then that it exits cleanly when its parent closes its
// stdin before the attacks start.
func TestLoadAbuserYieldsTheCPU(t *testing.T) {
	mk, err := abuserCommand(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := mk(context.Background())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// A plan that needs no server until the attacks start.
	plan := `{"Server":"http://127.0.0.1:1","Name":"x","Config":{"QuotaHeadroomBytes":1,"QuotaXorbBytes":1024,"SprayAddr":"none"}}` + "\n"
	if _, err := io.WriteString(stdin, plan); err != nil {
		t.Fatal(err)
	}
	var ready struct{ Ready string }
	if err := gob.NewDecoder(stdout).Decode(&ready); err != nil {
		t.Fatalf("no ready message: %v", err)
	}
	if !strings.Contains(ready.Ready, "SCHED_IDLE") || !strings.Contains(ready.Ready, fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Errorf("ready message %q; want the pid and SCHED_IDLE", ready.Ready)
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // the thread exited
		}
		if attr.Policy != unix.SCHED_IDLE {
			t.Errorf("thread %d has scheduling policy %d, want SCHED_IDLE (%d)", tid, attr.Policy, unix.SCHED_IDLE)
		}
	}
	if len(tasks) < 2 {
		t.Errorf("the abuser process has %d threads; the check saw too few to mean anything", len(tasks))
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("after its stdin closed: %v", err)
	}
}
