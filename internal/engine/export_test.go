package engine

// RetryDelayAt is RetryDelay with its jitter draw u in [0, 1] given, for table tests of
// the curve.
var RetryDelayAt = retryDelay

// LatencyOfBucket is the duration, in milliseconds, a latency histogram bucket stands for.
var LatencyOfBucket = latencyOfBucket
