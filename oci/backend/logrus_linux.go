package backend

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// libcontainer logs through logrus, which writes its own text format to
// stderr; sandcell's logs are slog records. The first runtime made routes
// logrus into slog: to the logger of the latest runtime given one (else
// slog's default), at the entry's level. libcontainer warns of every
// function hook it cannot write into a container's state ("cannot
// serialize hook"): the fill helper's (fill_linux.go) is one on purpose,
// so that warning is a debug record.

var (
	logrusOnce sync.Once
	logrusLog  atomic.Pointer[slog.Logger]
)

// routeLogrus sends libcontainer's logrus entries to log (nil: keep the
// logger set before).
func routeLogrus(log *slog.Logger) {
	if log != nil {
		logrusLog.Store(log)
	}
	logrusOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		logrus.AddHook(slogHook{})
	})
}

type slogHook struct{}

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (slogHook) Fire(e *logrus.Entry) error {
	log := logrusLog.Load()
	if log == nil {
		log = slog.Default()
	}
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(e.Message, "cannot serialize hook"):
	case e.Level <= logrus.ErrorLevel:
		level = slog.LevelError
	case e.Level == logrus.WarnLevel:
		level = slog.LevelWarn
	case e.Level == logrus.InfoLevel:
		level = slog.LevelInfo
	}
	attrs := make([]any, 0, 2+2*len(e.Data))
	attrs = append(attrs, "component", "libcontainer")
	for k, v := range e.Data {
		attrs = append(attrs, k, v)
	}
	log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}
