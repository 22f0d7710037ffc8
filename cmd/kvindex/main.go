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

	"github.com/kvindex/kvindex/server"
	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// usageError marks errors that exit 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// env is the environment variable of a command's flag: KVINDEX_<COMMAND>_<FLAG> (dashes become
// underscores), so one variable never sets the same-named flag of two commands; a global flag
// (cmd "") is KVINDEX_<FLAG>. also lists older names that keep working (serve's KVINDEX_<FLAG>,
// which docs/API.md promises).
func env(cmd, flag string, also ...string) []string {
	name := flag
	if cmd != "" {
		name = cmd + "-" + flag
	}
	return append([]string{envName(name)}, also...)
}

func envName(s string) string { return "KVINDEX_" + strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// serveEnv is env for serve's flags: KVINDEX_SERVE_<FLAG>, and KVINDEX_<FLAG> as before.
func serveEnv(flag string) []string { return env("serve", flag, envName(flag)) }

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
		// kvindex returns no ExitCoder itself; the CLI library's (an unknown help topic, its
		// code 3) are usage errors.
		fmt.Fprintf(stderr, "kvindex: usage: %s\n", oneLine(err))
		return 2
	}
	fmt.Fprintf(stderr, "kvindex: %v\n", oneLine(err))
	return 1
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "kvindex",
		Usage:     "a persistent KV-cache block index for KV-aware LLM routing",
		Version:   server.BuildVersion(),
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("", "log-level")},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: env("", "log-format")},
		},
		OnUsageError:   func(_ *cli.Context, err error, _ bool) error { return usageError{err} },
		ExitErrHandler: func(*cli.Context, error) {}, // run() prints and picks the exit code
		Commands: []*cli.Command{
			serveCommand(),
			compactCommand(), exportCommand(), inspectCommand(), verifyCommand(),
			benchCommand(),
			loadgenCommand(),
			versionCommand(),
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

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version (the same as kvindex --version)",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("version takes no arguments, got %q", c.Args().Slice())
			}
			cli.VersionPrinter(c)
			return nil
		},
	}
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
