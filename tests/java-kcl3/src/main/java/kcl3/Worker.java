package kcl3;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import kcltest.Args;
import kcltest.Clients;
import kcltest.LoggedProcessor;
import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.http.Protocol;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.common.StreamConfig;
import software.amazon.kinesis.common.StreamIdentifier;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.lifecycle.events.ProcessRecordsInput;
import software.amazon.kinesis.metrics.MetricsLevel;
import software.amazon.kinesis.processor.FormerStreamsLeasesDeletionStrategy;
import software.amazon.kinesis.processor.MultiStreamTracker;
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

    public static void main(String[] args) throws Exception {
        Args given = Args.parse(args);
        String stream = given.stream();
        KinesisAsyncClient kinesis = KinesisAsyncClient.builder()
                .region(Clients.region()).credentialsProvider(DefaultCredentialsProvider.create())
                .httpClientBuilder(NettyNioAsyncHttpClient.builder().protocol(Protocol.HTTP1_1))
                .endpointOverride(Clients.endpoint("AWS_ENDPOINT_URL_KINESIS")).build();
        DynamoDbAsyncClient dynamo = Clients.dynamoDb();
        CloudWatchAsyncClient cloudWatch = Clients.cloudWatch();
        InitialPositionInStreamExtended trimHorizon = InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON);
        boolean multi = stream.contains(",");
        ConfigsBuilder configs = multi
                ? new ConfigsBuilder(tracker(kinesis, stream.split(","), trimHorizon), given.application(), kinesis, dynamo, cloudWatch, given.workerId(), new Factory())
                : new ConfigsBuilder(stream, given.application(), kinesis, dynamo, cloudWatch, given.workerId(), new Factory());
        var retrieval = configs.retrievalConfig();
        if (!multi) {
            retrieval.initialPositionInStreamExtended(trimHorizon);
        }
        Scheduler scheduler = new Scheduler(
                configs.checkpointConfig(),
                configs.coordinatorConfig(),
                configs.leaseManagementConfig().failoverTimeMillis(given.failoverMillis()),
                configs.lifecycleConfig(),
                configs.metricsConfig().metricsLevel(MetricsLevel.NONE),
                configs.processorConfig(),
                retrieval.retrievalSpecificConfig(multi ? new PollingConfig(kinesis) : new PollingConfig(stream, kinesis)));
        LoggedProcessor.run(scheduler, given.workerId());
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
    static final class Processor extends LoggedProcessor {
        private final StreamIdentifier stream;

        Processor(StreamIdentifier stream) {
            super(VERSION);
            this.stream = stream;
        }

        @Override
        protected String shardName(String shardId) {
            // kcl-host names a shard by its lease key: with the stream in a multi-stream application.
            return stream == null || stream.accountIdOptional().isEmpty() ? shardId : stream.serialize() + ":" + shardId;
        }

        @Override
        public void processRecords(ProcessRecordsInput input) {
            for (KinesisClientRecord record : input.records()) {
                byte[] data = new byte[record.data().remaining()];
                record.data().get(data);
                logRecord(record.sequenceNumber(), record.partitionKey(), new String(data, StandardCharsets.UTF_8));
            }
            if (!input.records().isEmpty()) {
                checkpoint(input.checkpointer());
            }
        }
    }
}
