"""What a CloudWatch user sees of kcl-host's metrics, for the acceptance tests.

  python cloudwatch_check.py read ENDPOINT NAMESPACE
      Every metric of NAMESPACE (ListMetrics), each with its dimensions and,
      from GetMetricStatistics over the last hour, its SampleCount, Sum,
      Minimum and Maximum and the unit it was put with: one JSON object per
      line.
  python cloudwatch_check.py emf SCHEMA FILE
      Checks each line of FILE against the Embedded Metric Format
      specification: the JSON schema SCHEMA, and the rules a schema cannot say
      (each dimension and metric a member of the root, with a string or a
      number). Prints how many lines it checked; exits 1 at the first bad one.

boto3 speaks CloudWatch's JSON protocol, which moto answers (the Rust SDK's
CBOR goes through moto_serial.py's translation instead).
"""
import datetime
import json
import sys

import boto3
import jsonschema

def read(endpoint, namespace):
    client = boto3.client("cloudwatch", endpoint_url=endpoint, region_name="us-east-1")
    now = datetime.datetime.now(datetime.timezone.utc)
    seen = set()
    for metric in client.list_metrics(Namespace=namespace)["Metrics"]:
        dimensions = sorted((d["Name"], d["Value"]) for d in metric["Dimensions"])
        key = (metric["MetricName"], tuple(dimensions))
        if key in seen:
            continue
        seen.add(key)
        found = {"name": metric["MetricName"], "dimensions": dict(dimensions)}
        # GetMetricStatistics: moto 5.2.5's GetMetricData ignores the namespace.
        points = client.get_metric_statistics(
            Namespace=namespace,
            MetricName=metric["MetricName"],
            Dimensions=metric["Dimensions"],
            StartTime=now - datetime.timedelta(hours=1),
            EndTime=now + datetime.timedelta(minutes=5),
            Period=3600,
            Statistics=["SampleCount", "Sum", "Minimum", "Maximum"],
        )["Datapoints"]
        if points:
            found.update(
                unit=points[0]["Unit"],
                count=sum(p["SampleCount"] for p in points),
                sum=sum(p["Sum"] for p in points),
                min=min(p["Minimum"] for p in points),
                max=max(p["Maximum"] for p in points),
            )
        print(json.dumps(found))


def emf(schema_path, path):
    schema = json.load(open(schema_path))
    checked = 0
    for number, line in enumerate(open(path), 1):
        document = json.loads(line)
        try:
            jsonschema.validate(document, schema)
            for directive in document["_aws"]["CloudWatchMetrics"]:
                for dimension_set in directive["Dimensions"]:
                    for name in dimension_set:
                        assert isinstance(document.get(name), str), f"dimension {name} is not a string member of the root"
                for metric in directive["Metrics"]:
                    value = document.get(metric["Name"])
                    numbers = value if isinstance(value, list) else [value]
                    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers), f"metric {metric['Name']} is not a number member of the root"
                    assert len(numbers) <= 100, f"metric {metric['Name']} has more than 100 values"
        except (jsonschema.ValidationError, AssertionError) as error:
            print(f"line {number}: {error}\n{line}", file=sys.stderr)
            sys.exit(1)
        checked += 1
    print(checked)


if __name__ == "__main__":
    {"read": read, "emf": emf}[sys.argv[1]](*sys.argv[2:])
