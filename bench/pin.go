package bench

import "errors"

// ErrPin is returned (wrapped) when --pin cannot pin the client and the server apart.
var ErrPin = errors.New("cannot pin client and server apart")
