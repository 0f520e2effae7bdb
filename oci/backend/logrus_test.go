package backend

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestLogrusRouted: libcontainer's logrus entries become slog records of
// the runtime's logger at their level, its unavoidable warning of the
// fill helper's function hook a debug record; nothing reaches stderr in
// logrus's format. Before, every session run printed
// `level=warning msg="cannot serialize hook of type configs.FuncHook"`.
func TestLogrusRouted(t *testing.T) {
	var buf bytes.Buffer
	prev := logrusLog.Load()
	t.Cleanup(func() { logrusLog.Store(prev) })
	routeLogrus(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	logrus.Warnf("cannot serialize hook of type %T, skipping", t)
	logrus.WithField("id", "c1").Warn("something libcontainer warns of")
	out := buf.String()
	if strings.Contains(out, "cannot serialize hook") {
		t.Errorf("the function hook's warning was logged above debug: %q", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `msg="something libcontainer warns of"`) ||
		!strings.Contains(out, "component=libcontainer") || !strings.Contains(out, "id=c1") {
		t.Errorf("another warning as slog: %q", out)
	}
}
