package kcltest;

import java.net.URI;

import software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;

/** The clients both test workers need besides their source's, pointed at the local servers. */
public final class Clients {
    private Clients() {}

    /** AWS_REGION, or us-east-1. */
    public static Region region() {
        return Region.of(System.getenv().getOrDefault("AWS_REGION", "us-east-1"));
    }

    /** `variable`'s endpoint, which must be set. */
    public static URI endpoint(String variable) {
        return URI.create(System.getenv(variable));
    }

    /** The DynamoDB of the lease table: AWS_ENDPOINT_URL_DYNAMODB. */
    public static DynamoDbAsyncClient dynamoDb() {
        return DynamoDbAsyncClient.builder()
                .region(region()).credentialsProvider(DefaultCredentialsProvider.create())
                .endpointOverride(endpoint("AWS_ENDPOINT_URL_DYNAMODB")).build();
    }

    /** CloudWatch, unused: the workers run with metrics off. */
    public static CloudWatchAsyncClient cloudWatch() {
        return CloudWatchAsyncClient.builder().region(region()).build();
    }
}
