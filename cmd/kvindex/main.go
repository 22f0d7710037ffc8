package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// usageError marks errors that exit 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func env(name string) []string {
	return []string{"KVINDEX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "kvindex: usage: %v\n", ue.err)
		return 2
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "kvindex: %s\n", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(stderr, "kvindex: %v\n", oneLine(err))
	return 1
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "kvindex",
		Usage:     "a persistent KV-cache block index for KV-aware LLM routing",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: env("log-format")},
		},
		OnUsageError:   func(_ *cli.Context, err error, _ bool) error { return usageError{err} },
		ExitErrHandler: func(*cli.Context, error) {}, // run() prints and picks the exit code
		Commands: []*cli.Command{
			serveCommand(),
			compactCommand(), exportCommand(), inspectCommand(), verifyCommand(),
			benchCommand(),
			loadgenCommand(),
		},
	}
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return usagef("unknown command %q (see kvindex --help)", c.Args().First())
		}
		return cli.ShowAppHelp(c)
	}
	app.Before = func(c *cli.Context) error {
		lg, err := newLogger(c.String("log-level"), c.String("log-format"), stderr)
		if err != nil {
			return usageError{err}
		}
		slog.SetDefault(lg)
		return nil
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = app.OnUsageError
	}
	return app
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
