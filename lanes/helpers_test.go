package lanes

import (
	"errors"
	"io"
	"log/slog"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
