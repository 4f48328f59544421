/* A fixed delay on every packet an iptables NFQUEUE rule hands it: netem's `delay`, for a
 * kernel built without sch_netem (benchmarks/gate_power.py's shaped-netem condition).
 *
 *     nfq_delay QUEUE DELAY_US
 *
 * Binds NFQUEUE number QUEUE (meta data only, GSO packets whole), holds each packet DELAY_US
 * microseconds after it arrived, then accepts it; packets leave in the order they came (one
 * delay for all, so a batch verdict accepts every packet due). Prints "ready" on stdout once
 * bound; on SIGTERM or SIGINT prints "packets N late_us_max M late_us_p99 P" (how late the
 * verdicts were against their due times) and exits 0. Raw netlink, no libnetfilter_queue:
 * nothing to install but the compiler. Runs SCHED_FIFO with a 1 ns timer slack where it may, so
 * a busy machine delays its wake-ups as little as it can.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RING 65536
#define LATE_BINS 100000 /* microseconds */

static volatile sig_atomic_t stopping;
static uint32_t ring_id[RING];
static int64_t ring_due[RING];
static unsigned head, tail; /* head: oldest held; tail: next free */
static uint64_t late_hist[LATE_BINS + 1];

static void on_signal(int sig) { (void)sig; stopping = 1; }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void put_attr(char *buf, size_t *len, uint16_t type, const void *data, uint16_t size) {
    struct nlattr *a = (struct nlattr *)(buf + *len);
    a->nla_type = type;
    a->nla_len = NLA_HDRLEN + size;
    memcpy((char *)a + NLA_HDRLEN, data, size);
    *len += NLA_ALIGN(a->nla_len);
}

static size_t start_msg(char *buf, uint16_t type, uint16_t queue, uint16_t flags) {
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    memset(buf, 0, NLMSG_HDRLEN + sizeof(struct nfgenmsg));
    h->nlmsg_type = (NFNL_SUBSYS_QUEUE << 8) | type;
    h->nlmsg_flags = NLM_F_REQUEST | flags;
    struct nfgenmsg *g = (struct nfgenmsg *)(buf + NLMSG_HDRLEN);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(queue);
    return NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg));
}

static int send_msg(int fd, char *buf, size_t len) {
    ((struct nlmsghdr *)buf)->nlmsg_len = len;
    struct sockaddr_nl to = {.nl_family = AF_NETLINK};
    return sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof to) < 0 ? -1 : 0;
}

/* A config message, acknowledged: 0 or the kernel's error. */
static int configure(int fd, uint16_t queue, uint16_t attr, const void *data, uint16_t size) {
    char buf[256];
    size_t len = start_msg(buf, NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
    put_attr(buf, &len, attr, data, size);
    if (send_msg(fd, buf, len) < 0) return -errno;
    char reply[4096];
    ssize_t got = recv(fd, reply, sizeof reply, 0);
    if (got < 0) return -errno;
    struct nlmsghdr *h = (struct nlmsghdr *)reply;
    if (h->nlmsg_type == NLMSG_ERROR) return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
    return 0;
}

static void accept_through(int fd, uint16_t queue, uint32_t id) {
    char buf[128];
    size_t len = start_msg(buf, NFQNL_MSG_VERDICT_BATCH, queue, 0);
    struct nfqnl_msg_verdict_hdr v = {.verdict = htonl(NF_ACCEPT), .id = htonl(id)};
    put_attr(buf, &len, NFQA_VERDICT_HDR, &v, sizeof v);
    if (send_msg(fd, buf, len) < 0) perror("nfq_delay: verdict");
}

static void take_packets(int fd, int64_t delay_ns) {
    static char buf[1 << 16];
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                perror("nfq_delay: recv");
            return;
        }
        int64_t arrived = now_ns();
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)got);
             h = NLMSG_NEXT(h, got)) {
            if ((h->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
            char *p = (char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg));
            int left = (int)(h->nlmsg_len - ((char *)p - (char *)h));
            while (left >= NLA_HDRLEN) {
                struct nlattr *a = (struct nlattr *)p;
                if (a->nla_len < NLA_HDRLEN || a->nla_len > left) break;
                if ((a->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
                    struct nfqnl_msg_packet_hdr *ph = (void *)(p + NLA_HDRLEN);
                    if (tail - head >= RING) {
                        fprintf(stderr, "nfq_delay: more than %d packets held\n", RING);
                        exit(1);
                    }
                    ring_id[tail % RING] = ntohl(ph->packet_id);
                    ring_due[tail % RING] = arrived + delay_ns;
                    tail++;
                }
                p += NLA_ALIGN(a->nla_len);
                left -= NLA_ALIGN(a->nla_len);
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: nfq_delay QUEUE DELAY_US\n");
        return 2;
    }
    uint16_t queue = (uint16_t)atoi(argv[1]);
    int64_t delay_ns = (int64_t)(atof(argv[2]) * 1000);
    prctl(PR_SET_TIMERSLACK, 1UL);
    struct sched_param sp = {.sched_priority = 10};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) perror("nfq_delay: SCHED_FIFO (going on)");
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER);
    if (fd < 0) { perror("nfq_delay: socket"); return 1; }
    int size = 8 << 20, on = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);
    struct sockaddr_nl me = {.nl_family = AF_NETLINK};
    if (bind(fd, (struct sockaddr *)&me, sizeof me) < 0) { perror("nfq_delay: bind"); return 1; }

    struct nfqnl_msg_config_cmd bind_cmd = {.command = NFQNL_CFG_CMD_BIND, .pf = htons(AF_INET)};
    struct nfqnl_msg_config_params params = {.copy_range = htonl(0), .copy_mode = NFQNL_COPY_META};
    uint32_t maxlen = htonl(RING / 2);
    uint32_t flags[2] = {htonl(NFQA_CFG_F_GSO), htonl(NFQA_CFG_F_GSO)}; /* value, mask */
    int err;
    if ((err = configure(fd, queue, NFQA_CFG_CMD, &bind_cmd, sizeof bind_cmd)) ||
        (err = configure(fd, queue, NFQA_CFG_PARAMS, &params, sizeof params)) ||
        (err = configure(fd, queue, NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen))) {
        fprintf(stderr, "nfq_delay: binding queue %u: %s\n", queue, strerror(-err));
        return 1;
    }
    /* NFQA_CFG_FLAGS takes the flags, then NFQA_CFG_MASK which of them to set */
    {
        char buf[256];
        size_t len = start_msg(buf, NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
        put_attr(buf, &len, NFQA_CFG_FLAGS, &flags[0], 4);
        put_attr(buf, &len, NFQA_CFG_MASK, &flags[1], 4);
        char reply[4096];
        if (send_msg(fd, buf, len) < 0 || recv(fd, reply, sizeof reply, 0) < 0) {
            perror("nfq_delay: flags");
            return 1;
        }
        struct nlmsghdr *h = (struct nlmsghdr *)reply;
        if (h->nlmsg_type == NLMSG_ERROR && ((struct nlmsgerr *)NLMSG_DATA(h))->error) {
            fprintf(stderr, "nfq_delay: GSO flag: %s\n",
                    strerror(-((struct nlmsgerr *)NLMSG_DATA(h))->error));
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);

    uint64_t packets = 0;
    while (!stopping || head != tail) {
        int64_t now = now_ns();
        if (head != tail && ring_due[head % RING] <= now) {
            unsigned last = head;
            while (last + 1 != tail && ring_due[(last + 1) % RING] <= now) last++;
            accept_through(fd, queue, ring_id[last % RING]);
            for (; head != last + 1; head++) {
                int64_t late = (now - ring_due[head % RING]) / 1000;
                late_hist[late > LATE_BINS ? LATE_BINS : late]++;
                packets++;
            }
            continue;
        }
        struct timespec wait, *waitp = NULL;
        if (head != tail) {
            int64_t left = ring_due[head % RING] - now;
            wait.tv_sec = left / 1000000000;
            wait.tv_nsec = left % 1000000000;
            waitp = &wait;
        } else if (stopping) {
            break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = ppoll(&pfd, 1, waitp, NULL);
        if (ready > 0) take_packets(fd, delay_ns);
    }
    uint64_t seen = 0, p99 = 0, max = 0;
    int have_p99 = 0;
    for (int i = 0; i <= LATE_BINS; i++) {
        if (!late_hist[i]) continue;
        seen += late_hist[i];
        if (!have_p99 && seen * 100 >= packets * 99) {
            p99 = (uint64_t)i;
            have_p99 = 1;
        }
        max = (uint64_t)i;
    }
    printf("packets %llu late_us_max %llu late_us_p99 %llu\n", (unsigned long long)packets,
           (unsigned long long)max, (unsigned long long)p99);
    return 0;
}
