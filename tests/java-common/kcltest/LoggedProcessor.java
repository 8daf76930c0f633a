package kcltest;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;
import software.amazon.kinesis.processor.RecordProcessorCheckpointer;
import software.amazon.kinesis.processor.ShardRecordProcessor;

/**
 * What the test kit's Java workers share (compiled into each, against its
 * own KCL): a processor that logs its life on stdout as kcl-host's counter
 * example logs its records ({@code java-kcl: record <seq> <key> <data> shard="<id>" processor="<version>"}),
 * checkpoints after every batch and at the shard's end or a requested
 * shutdown; and a scheduler run that stops gracefully on SIGTERM.
 */
public abstract class LoggedProcessor implements ShardRecordProcessor {
    /** Stdout, flushed at each line (the tests read it as it comes). */
    public static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    private final String version;
    private String shard;

    protected LoggedProcessor(String version) {
        this.version = version;
    }

    /** The name the log gives the shard: its id, or as kcl-host names it. */
    protected String shardName(String shardId) {
        return shardId;
    }

    @Override
    public void initialize(InitializationInput input) {
        shard = shardName(input.shardId());
        OUT.println("java-kcl: initialize shard=\"" + shard + "\" checkpoint=\"" + input.extendedSequenceNumber() + "\"");
    }

    /** Logs one record. */
    protected void logRecord(String sequenceNumber, String key, String data) {
        OUT.println("java-kcl: record " + sequenceNumber + " " + key + " " + data + " shard=\"" + shard + "\" processor=\"" + version + "\"");
    }

    @Override
    public void leaseLost(LeaseLostInput input) {
        OUT.println("java-kcl: lease lost shard=\"" + shard + "\"");
    }

    @Override
    public void shardEnded(ShardEndedInput input) {
        checkpoint(input.checkpointer());
    }

    @Override
    public void shutdownRequested(ShutdownRequestedInput input) {
        checkpoint(input.checkpointer());
    }

    protected void checkpoint(RecordProcessorCheckpointer checkpointer) {
        try {
            checkpointer.checkpoint();
        } catch (Exception e) {
            // The lease moved on: the next owner reads again from the last checkpoint.
            OUT.println("java-kcl: checkpoint refused shard=\"" + shard + "\": " + e);
        }
    }

    /** Runs `scheduler` until the process is stopped; SIGTERM stops it gracefully, checkpointed. */
    public static void run(Scheduler scheduler, String workerId) {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                scheduler.startGracefulShutdown().get(20, TimeUnit.SECONDS);
                OUT.println("java-kcl: stopped");
            } catch (Exception e) {
                OUT.println("java-kcl: graceful stop failed: " + e);
            }
        }));
        OUT.println("java-kcl: started worker=\"" + workerId + "\"");
        scheduler.run();
    }
}
