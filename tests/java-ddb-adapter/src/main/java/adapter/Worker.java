package adapter;


import com.amazonaws.services.dynamodbv2.streamsadapter.AmazonDynamoDBStreamsAdapterClient;
import com.amazonaws.services.dynamodbv2.streamsadapter.StreamsSchedulerFactory;
import com.amazonaws.services.dynamodbv2.streamsadapter.adapter.DynamoDBStreamsClientRecord;
import com.amazonaws.services.dynamodbv2.streamsadapter.model.DynamoDBStreamsProcessRecordsInput;
import com.amazonaws.services.dynamodbv2.streamsadapter.polling.DynamoDBStreamsPollingConfig;
import com.amazonaws.services.dynamodbv2.streamsadapter.processor.DynamoDBStreamsShardRecordProcessor;
import kcltest.Args;
import kcltest.Clients;
import kcltest.LoggedProcessor;
import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.dynamodb.model.Record;
import software.amazon.awssdk.services.dynamodb.streams.DynamoDbStreamsClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.metrics.MetricsLevel;

/**
 * A worker of a DynamoDB table's stream built as the DynamoDB Streams Kinesis
 * Adapter 2.0.1 documents it ({@code StreamsSchedulerFactory}, a single-stream
 * tracker, {@code DynamoDBStreamsPollingConfig}), for the test that passes a
 * stream between it and kcl-host. It logs each change as kcl-host's counter
 * example logs a record ({@code java-kcl: record <seq> <pk> <event> shard="<id>" processor="ddb-adapter-2.0.1"},
 * {@code pk} being the item's partition key value, as kcl-host's partition
 * key), checkpoints after every batch, and stops gracefully on SIGTERM.
 *
 * <p>Arguments: stream ARN, application, worker id, failover time in ms.
 * Endpoints and credentials come from AWS_ENDPOINT_URL_DYNAMODB_STREAMS /
 * _DYNAMODB and the default chain.
 */
public final class Worker {
    private static final String VERSION = "ddb-adapter-2.0.1";

    public static void main(String[] args) throws Exception {
        Args given = Args.parse(args);
        String arn = given.stream();
        Region region = Clients.region();
        DynamoDbStreamsClient streams = DynamoDbStreamsClient.builder()
                .region(region).credentialsProvider(DefaultCredentialsProvider.create())
                .endpointOverride(Clients.endpoint("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")).build();
        AmazonDynamoDBStreamsAdapterClient adapter = new AmazonDynamoDBStreamsAdapterClient(streams, region);
        DynamoDbAsyncClient dynamo = Clients.dynamoDb();
        CloudWatchAsyncClient cloudWatch = Clients.cloudWatch();
        var tracker = StreamsSchedulerFactory.createSingleStreamTracker(arn,
                InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON));
        ConfigsBuilder configs = new ConfigsBuilder(tracker, given.application(), adapter, dynamo, cloudWatch, given.workerId(), Processor::new);
        Scheduler scheduler = StreamsSchedulerFactory.createScheduler(
                configs.checkpointConfig(),
                configs.coordinatorConfig(),
                configs.leaseManagementConfig().failoverTimeMillis(given.failoverMillis()),
                configs.lifecycleConfig(),
                configs.metricsConfig().metricsLevel(MetricsLevel.NONE),
                configs.processorConfig(),
                configs.retrievalConfig().retrievalSpecificConfig(new DynamoDBStreamsPollingConfig(adapter)),
                adapter);
        LoggedProcessor.run(scheduler, given.workerId());
    }

    /** Logs each change and checkpoints after every batch. */
    static final class Processor extends LoggedProcessor implements DynamoDBStreamsShardRecordProcessor {
        Processor() {
            super(VERSION);
        }

        @Override
        public void processRecords(DynamoDBStreamsProcessRecordsInput input) {
            for (DynamoDBStreamsClientRecord change : input.records()) {
                Record record = change.getRecord();
                logRecord(change.sequenceNumber(), record.dynamodb().keys().get("pk").s(), record.eventNameAsString());
            }
            if (!input.records().isEmpty()) {
                checkpoint(input.checkpointer());
            }
        }
    }
}
