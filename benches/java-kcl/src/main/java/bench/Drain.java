package bench;

import java.net.URI;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;

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
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ProcessRecordsInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;
import software.amazon.kinesis.metrics.MetricsLevel;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.retrieval.polling.PollingConfig;

/**
 * Drains a stream with Java KCL 2.7.2 (polling, its defaults otherwise) and
 * prints one line: the seconds from the JVM's start and from the first record
 * to the last, and the CPU-seconds spent (the JVM's start-up included).
 * Arguments: stream, application, expected record count. Endpoints and
 * credentials come from AWS_ENDPOINT_URL_KINESIS / _DYNAMODB and the
 * default chain, as for kcl-host.
 */
public final class Drain {
    private static final AtomicLong processed = new AtomicLong();
    private static final AtomicLong firstNanos = new AtomicLong();

    public static void main(String[] args) throws Exception {
        String stream = args[0];
        String application = args[1];
        long expected = Long.parseLong(args[2]);
        Region region = Region.of(System.getenv().getOrDefault("AWS_REGION", "us-east-1"));
        NettyNioAsyncHttpClient.Builder http = NettyNioAsyncHttpClient.builder().protocol(Protocol.HTTP1_1);
        KinesisAsyncClient kinesis = KinesisAsyncClient.builder()
                .region(region).credentialsProvider(DefaultCredentialsProvider.create()).httpClientBuilder(http)
                .endpointOverride(URI.create(System.getenv("AWS_ENDPOINT_URL_KINESIS"))).build();
        DynamoDbAsyncClient dynamo = DynamoDbAsyncClient.builder()
                .region(region).credentialsProvider(DefaultCredentialsProvider.create())
                .endpointOverride(URI.create(System.getenv("AWS_ENDPOINT_URL_DYNAMODB"))).build();
        CloudWatchAsyncClient cloudWatch = CloudWatchAsyncClient.builder().region(region).build();
        ConfigsBuilder configs = new ConfigsBuilder(stream, application, kinesis, dynamo, cloudWatch,
                UUID.randomUUID().toString(), Counter::new);
        Scheduler scheduler = new Scheduler(
                configs.checkpointConfig(),
                configs.coordinatorConfig(),
                configs.leaseManagementConfig(),
                configs.lifecycleConfig(),
                configs.metricsConfig().metricsLevel(MetricsLevel.NONE),
                configs.processorConfig(),
                configs.retrievalConfig()
                        .initialPositionInStreamExtended(InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON))
                        .retrievalSpecificConfig(new PollingConfig(stream, kinesis)));
        Thread worker = new Thread(scheduler);
        worker.setDaemon(true);
        worker.start();
        while (processed.get() < expected) {
            Thread.sleep(20);
        }
        double seconds = (System.nanoTime() - firstNanos.get()) / 1e9;
        double cpu = ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1e9;
        double uptime = java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime() / 1e3;
        System.out.printf("start -> drained %.1f s; first record -> drained %.1f s; %.1f CPU-seconds; %d records%n", uptime, seconds, cpu, processed.get());
        System.out.flush();
        scheduler.startGracefulShutdown().get();
        System.exit(0);
    }

    /** Counts records; checkpoints every batch, as the counter guest does every 100 records or so. */
    static final class Counter implements ShardRecordProcessor {
        @Override public void initialize(InitializationInput input) {}

        @Override public void processRecords(ProcessRecordsInput input) {
            if (input.records().isEmpty()) {
                return;
            }
            firstNanos.compareAndSet(0, System.nanoTime());
            processed.addAndGet(input.records().size());
            try {
                input.checkpointer().checkpoint();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }

        @Override public void leaseLost(LeaseLostInput input) {}

        @Override public void shardEnded(ShardEndedInput input) {
            try {
                input.checkpointer().checkpoint();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }

        @Override public void shutdownRequested(ShutdownRequestedInput input) {}
    }
}
