package localstack

import "testing"

// TestEnvNamesS3OnTheSQSEmulator: fauxqs and moto_server serve S3 on their SQS port, so the
// payload bucket is reachable wherever SQS is.
func TestEnvNamesS3OnTheSQSEmulator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs []*Process
		want  string
	}{
		{"fauxqs", []*Process{{Service: Kinesis, Endpoint: "http://k"}, {Service: DynamoDB, Endpoint: "http://d"}, {Service: SQS, Endpoint: "http://f"}}, "http://f"},
		{"moto", []*Process{{Service: Kinesis, Endpoint: "http://k"}, {Service: Moto, Endpoint: "http://m"}}, "http://m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := Env(tc.procs)
			if env["AWS_ENDPOINT_URL_S3"] != tc.want || env["AWS_ENDPOINT_URL_SQS"] != tc.want {
				t.Errorf("S3 %q SQS %q, want both %q", env["AWS_ENDPOINT_URL_S3"], env["AWS_ENDPOINT_URL_SQS"], tc.want)
			}
		})
	}
}
