package load

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// envAbuserChild makes this test binary the abuser's child process
// (Config.AbuserCommand) instead of running the tests.
const envAbuserChild = "OPENXET_TEST_ABUSER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envAbuserChild) == "1" {
		if err := ServeAbuser(context.Background(), os.Stdin, os.Stdout, fmt.Sprintf("pid %d, the test binary", os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
