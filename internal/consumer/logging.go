package consumer

import (
	"context"
	"io"
	"log/slog"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// NewLogger returns a JSON slog logger writing to w (os.Stdout in Lambda, where CloudWatch Logs
// collects it) at level, adding request_id from the Lambda context of every *Context call. It
// is the equivalent of lambdacontext.NewLogger() (aws-lambda-go ≥ 1.52) with gapless's fixed
// key names (request_id, group, shard_id, sequence_number) and always JSON.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// ParseLevel maps AWS_LAMBDA_LOG_LEVEL values (DEBUG, INFO, WARN, ERROR; Lambda's advanced
// logging controls) to a slog level; anything else is INFO.
func ParseLevel(s string) slog.Level {
	switch s {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN":
		return slog.LevelWarn
	case "ERROR", "FATAL":
		return slog.LevelError
	}
	return slog.LevelInfo
}

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r.AddAttrs(slog.String("request_id", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
