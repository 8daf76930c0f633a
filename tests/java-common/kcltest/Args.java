package kcltest;

/**
 * What both test workers are started with: the stream (a Kinesis stream,
 * streams separated by commas, or a DynamoDB stream's ARN), the
 * application, the worker id, and the failover time in ms (as kcl-host's
 * {@code --failover-time}: the two must judge leases alike).
 */
public record Args(String stream, String application, String workerId, long failoverMillis) {
    public static Args parse(String[] args) {
        return new Args(args[0], args[1], args[2], Long.parseLong(args[3]));
    }
}
