package kcl3;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.http.Protocol;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.common.StreamConfig;
import software.amazon.kinesis.common.StreamIdentifier;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ProcessRecordsInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;
import software.amazon.kinesis.metrics.MetricsLevel;
import software.amazon.kinesis.processor.FormerStreamsLeasesDeletionStrategy;
import software.amazon.kinesis.processor.MultiStreamTracker;
import software.amazon.kinesis.processor.RecordProcessorCheckpointer;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.processor.ShardRecordProcessorFactory;
import software.amazon.kinesis.retrieval.KinesisClientRecord;
import software.amazon.kinesis.retrieval.polling.PollingConfig;

/**
 * A Java KCL 3.5.1 worker, for the test of a fleet that mixes it with
 * kcl-host. It logs each record on stdout as kcl-host's counter example
 * does ({@code java-kcl: record <seq> <key> <data> shard="<id>" processor="java-kcl-3.5.1"}),
 * checkpoints after every batch, and stops gracefully on SIGTERM.
 *
 * <p>Arguments: stream, application, worker id, failover time in ms (as
 * kcl-host's {@code --failover-time}: the two must judge leases alike).
 * Streams separated by commas make it a multi-stream application (a
 * {@code MultiStreamTracker}; lease keys {@code account:stream:creationEpoch:shardId},
 * each stream identified from DescribeStreamSummary as kcl-host does), and
 * its lines then name the shard by that key, as kcl-host's do.
 * Endpoints and credentials come from AWS_ENDPOINT_URL_KINESIS / _DYNAMODB
 * and the default chain.
 */
public final class Worker {
    private static final String VERSION = "java-kcl-3.5.1";
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        String stream = args[0];
        String application = args[1];
        String workerId = args[2];
        long failoverMillis = Long.parseLong(args[3]);
        Region region = Region.of(System.getenv().getOrDefault("AWS_REGION", "us-east-1"));
        KinesisAsyncClient kinesis = KinesisAsyncClient.builder()
                .region(region).credentialsProvider(DefaultCredentialsProvider.create())
                .httpClientBuilder(NettyNioAsyncHttpClient.builder().protocol(Protocol.HTTP1_1))
                .endpointOverride(URI.create(System.getenv("AWS_ENDPOINT_URL_KINESIS"))).build();
        DynamoDbAsyncClient dynamo = DynamoDbAsyncClient.builder()
                .region(region).credentialsProvider(DefaultCredentialsProvider.create())
                .endpointOverride(URI.create(System.getenv("AWS_ENDPOINT_URL_DYNAMODB"))).build();
        CloudWatchAsyncClient cloudWatch = CloudWatchAsyncClient.builder().region(region).build();
        InitialPositionInStreamExtended trimHorizon = InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON);
        boolean multi = stream.contains(",");
        ConfigsBuilder configs = multi
                ? new ConfigsBuilder(tracker(kinesis, stream.split(","), trimHorizon), application, kinesis, dynamo, cloudWatch, workerId, new Factory())
                : new ConfigsBuilder(stream, application, kinesis, dynamo, cloudWatch, workerId, new Factory());
        var retrieval = configs.retrievalConfig();
        if (!multi) {
            retrieval.initialPositionInStreamExtended(trimHorizon);
        }
        Scheduler scheduler = new Scheduler(
                configs.checkpointConfig(),
                configs.coordinatorConfig(),
                configs.leaseManagementConfig().failoverTimeMillis(failoverMillis),
                configs.lifecycleConfig(),
                configs.metricsConfig().metricsLevel(MetricsLevel.NONE),
                configs.processorConfig(),
                retrieval.retrievalSpecificConfig(multi ? new PollingConfig(kinesis) : new PollingConfig(stream, kinesis)));
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

    /** The streams, each identified as {@code account:name:creationEpoch} from its summary. */
    private static MultiStreamTracker tracker(KinesisAsyncClient kinesis, String[] names, InitialPositionInStreamExtended position) throws Exception {
        List<StreamConfig> streams = new ArrayList<>();
        for (String name : names) {
            var summary = kinesis.describeStreamSummary(r -> r.streamName(name)).get().streamDescriptionSummary();
            String account = summary.streamARN().split(":")[4];
            long created = summary.streamCreationTimestamp().getEpochSecond();
            streams.add(new StreamConfig(StreamIdentifier.multiStreamInstance(account + ":" + name + ":" + created), position));
        }
        return new MultiStreamTracker() {
            @Override
            public List<StreamConfig> streamConfigList() {
                return streams;
            }

            @Override
            public FormerStreamsLeasesDeletionStrategy formerStreamsLeasesDeletionStrategy() {
                return new FormerStreamsLeasesDeletionStrategy.NoLeaseDeletionStrategy();
            }
        };
    }

    /** A processor per shard; in a multi-stream application it knows its stream. */
    static final class Factory implements ShardRecordProcessorFactory {
        @Override
        public ShardRecordProcessor shardRecordProcessor() {
            return new Processor(null);
        }

        @Override
        public ShardRecordProcessor shardRecordProcessor(StreamIdentifier stream) {
            return new Processor(stream);
        }
    }

    /** Logs each record and checkpoints after every batch. */
    static final class Processor implements ShardRecordProcessor {
        private final StreamIdentifier stream;
        private String shard;

        Processor(StreamIdentifier stream) {
            this.stream = stream;
        }

        @Override
        public void initialize(InitializationInput input) {
            // kcl-host names a shard by its lease key: with the stream in a multi-stream application.
            shard = stream == null || stream.accountIdOptional().isEmpty() ? input.shardId() : stream.serialize() + ":" + input.shardId();
            OUT.println("java-kcl: initialize shard=\"" + shard + "\" checkpoint=\"" + input.extendedSequenceNumber() + "\"");
        }

        @Override
        public void processRecords(ProcessRecordsInput input) {
            for (KinesisClientRecord record : input.records()) {
                byte[] data = new byte[record.data().remaining()];
                record.data().get(data);
                OUT.println("java-kcl: record " + record.sequenceNumber() + " " + record.partitionKey() + " "
                        + new String(data, StandardCharsets.UTF_8) + " shard=\"" + shard + "\" processor=\"" + VERSION + "\"");
            }
            if (!input.records().isEmpty()) {
                checkpoint(input.checkpointer());
            }
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

        private void checkpoint(RecordProcessorCheckpointer checkpointer) {
            try {
                checkpointer.checkpoint();
            } catch (Exception e) {
                // The lease moved on: the next owner reads again from the last checkpoint.
                OUT.println("java-kcl: checkpoint refused shard=\"" + shard + "\": " + e);
            }
        }
    }
}
