// flood: one user's attack on kprofd serve's socket. It opens N
// connections, each sending the headers of a session request and a part
// of its body, then holds them all open until its stdin ends.
//
// Build: gcc -O2 -o flood flood.c
// Run:   flood SOCKET N     prints "held N" once all N are connected

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char request[] =
	"POST /v1/sessions HTTP/1.1\r\nHost: kprofd\r\nContent-Type: application/json\r\n"
	"Content-Length: 1000\r\n\r\n{\"pid\": 1, \"roots\": [";

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: flood SOCKET N\n");
		return 2;
	}
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
	long n = atol(argv[2]), held = 0;
	for (long i = 0; i < n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0) {
			perror("socket");
			break;
		}
		// A full backlog refuses for a moment (EAGAIN): try again.
		while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
			if (errno != EAGAIN && errno != EINTR) {
				perror("connect");
				return 1;
			}
			usleep(1000);
		}
		// The daemon may have answered and closed already: a failed
		// write still holds the connection's descriptor here.
		send(fd, request, sizeof request - 1, MSG_NOSIGNAL);
		held++;
	}
	printf("held %ld\n", held);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
