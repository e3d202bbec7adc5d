package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// maxMessageBytes is SQS's message size limit (body and attributes, 1 MiB).
const maxMessageBytes = 1 << 20

// SQS is an in-memory set of standard queues: visibility timeouts, receive counts, receipt
// handles that change on every receive (a stale handle deletes nothing), messages in send order.
type SQS struct {
	mu     sync.Mutex
	queues map[string]*queue // by URL
	n      int
}

type queue struct {
	name string
	msgs []*message
	sent []string // every body ever sent, deleted or not
}

type message struct {
	id, body  string
	attrs     map[string]types.MessageAttributeValue
	visibleAt time.Time
	receives  int
	handle    string
	sent      time.Time
}

// NewSQS returns a model with no queues.
func NewSQS() *SQS { return &SQS{queues: map[string]*queue{}} }

// CreateQueue adds a queue and returns its URL.
func (s *SQS) CreateQueue(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	url := "https://sqs.us-east-1.amazonaws.com/123456789012/" + name
	s.queues[url] = &queue{name: name}
	return url
}

// ARN is the ARN of the queue at url.
func ARN(url string) string {
	return "arn:aws:sqs:us-east-1:123456789012:" + url[strings.LastIndex(url, "/")+1:]
}

// Bodies lists the bodies of every message in the queue (visible or not).
func (s *SQS) Bodies(url string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.queues[url].msgs {
		out = append(out, m.body)
	}
	return out
}

func (s *SQS) queue(url *string) (*queue, error) {
	q, ok := s.queues[aws.ToString(url)]
	if !ok {
		return nil, &types.QueueDoesNotExist{Message: aws.String("queue " + aws.ToString(url))}
	}
	return q, nil
}

// SendMessage appends a message.
// Sent lists the body of every message ever sent to the queue, deleted or not.
func (s *SQS) Sent(url string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queues[url].sent...)
}

func (s *SQS) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	size := len(aws.ToString(in.MessageBody))
	for k, v := range in.MessageAttributes {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	if size > maxMessageBytes {
		return nil, &types.InvalidMessageContents{Message: aws.String(fmt.Sprintf("message of %d bytes is longer than %d", size, maxMessageBytes))}
	}
	s.n++
	t := now()
	m := &message{id: "m" + strconv.Itoa(s.n), body: aws.ToString(in.MessageBody), attrs: in.MessageAttributes,
		visibleAt: t.Add(time.Duration(in.DelaySeconds) * time.Second), sent: t}
	q.msgs = append(q.msgs, m)
	q.sent = append(q.sent, m.body)
	return &sqs.SendMessageOutput{MessageId: aws.String(m.id)}, nil
}

// ReceiveMessage returns up to MaxNumberOfMessages visible messages and hides them for the
// visibility timeout (default 30 s).
func (s *SQS) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	n := max(1, int(in.MaxNumberOfMessages))
	vis := 30 * time.Second
	if in.VisibilityTimeout > 0 {
		vis = time.Duration(in.VisibilityTimeout) * time.Second
	}
	t := now()
	out := &sqs.ReceiveMessageOutput{}
	for _, m := range q.msgs {
		if len(out.Messages) == n {
			break
		}
		if m.visibleAt.After(t) {
			continue
		}
		m.receives++
		s.n++
		m.handle = m.id + "/" + strconv.Itoa(s.n)
		m.visibleAt = t.Add(vis)
		out.Messages = append(out.Messages, types.Message{MessageId: aws.String(m.id), Body: aws.String(m.body),
			ReceiptHandle: aws.String(m.handle), MessageAttributes: m.attrs,
			Attributes: map[string]string{
				"ApproximateReceiveCount":          strconv.Itoa(m.receives),
				"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
				"ApproximateFirstReceiveTimestamp": strconv.FormatInt(t.UnixMilli(), 10),
			}})
	}
	return out, nil
}

// DeleteMessage deletes the message whose latest receipt handle is given.
func (s *SQS) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	for i, m := range q.msgs {
		if m.handle == aws.ToString(in.ReceiptHandle) {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			break
		}
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// ChangeMessageVisibility resets a received message's visibility timeout.
func (s *SQS) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	for _, m := range q.msgs {
		if m.handle == aws.ToString(in.ReceiptHandle) {
			m.visibleAt = now().Add(time.Duration(in.VisibilityTimeout) * time.Second)
			return &sqs.ChangeMessageVisibilityOutput{}, nil
		}
	}
	return nil, &types.ReceiptHandleIsInvalid{Message: aws.String("receipt handle is not current")}
}

// GetQueueUrl resolves a queue name.
func (s *SQS) GetQueueUrl(_ context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for url, q := range s.queues {
		if q.name == aws.ToString(in.QueueName) {
			return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(url)}, nil
		}
	}
	return nil, &types.QueueDoesNotExist{Message: aws.String("queue " + aws.ToString(in.QueueName))}
}
