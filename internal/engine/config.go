package engine

import (
	"errors"
	"fmt"
)

// ConfigError is a setting that a service refuses when it is made: Setting names the
// field of its Config, Env the server's environment variable that sets it ("" when none
// does). A ConfigError is ErrInvalid.
type ConfigError struct {
	Service, Setting, Env string
	Value                 any
	Problem               string
}

func (e *ConfigError) Error() string {
	setting := e.Setting
	if e.Env != "" {
		setting += " (" + e.Env + ")"
	}
	return fmt.Sprintf("%s: %s is %v: %s", e.Service, setting, e.Value, e.Problem)
}

func (e *ConfigError) Unwrap() error { return ErrInvalid }

// ConfigCheck collects what a service's Config.Validate refuses.
type ConfigCheck struct {
	// Service names the service in the messages ("dispatch", "reaper"…).
	Service string
	errs    []error
}

// Check refuses setting (set by the environment variable env, "" for none) unless ok:
// value is what it holds, problem what it must be instead.
func (c *ConfigCheck) Check(ok bool, setting, env string, value any, problem string) {
	if !ok {
		c.errs = append(c.errs, &ConfigError{Service: c.Service, Setting: setting, Env: env, Value: value, Problem: problem})
	}
}

// Err is every setting refused, joined (nil: none).
func (c *ConfigCheck) Err() error { return errors.Join(c.errs...) }

// mustBeValid panics with err, the refusal of a service's Validate: a service made with a
// configuration it cannot run fails when it is made, not later in its loop. The server
// validates every configuration before it makes anything, so an operator meets the
// error, not the panic.
func mustBeValid(err error) {
	if err != nil {
		panic(err)
	}
}
