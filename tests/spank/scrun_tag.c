/*
 * scrun_tag: a test SPANK plugin for scrun-py (loaded "optional" in plugstack.conf).
 *
 * Registers --scrun-tag=VALUE.  Every callback it implements appends one line
 *     <context> <callback> <value> <job id or ->
 * to the file named by its plugstack argument log=PATH, so a test can see which
 * contexts ran for a container's job and with which option value.  With the option
 * it also sets SCRUN_TAG=<value> twice: in the job control environment from the
 * allocator (salloc exports it as SLURM_SPANK_SCRUN_TAG) and in the task's
 * environment from the remote task context.  Without the option it only logs
 * (value "-"), so other jobs are unaffected.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(scrun_tag, 1);

static char tag_value[256];
static char log_path[1024];

static int tag_option_cb(int val, const char *optarg, int remote)
{
	(void) val;
	(void) remote;
	if (optarg == NULL || strlen(optarg) >= sizeof(tag_value))
		return -1;
	strcpy(tag_value, optarg);
	return 0;
}

static struct spank_option tag_option = {
	"scrun-tag", "VALUE", "tag this job (scrun-py SPANK test)", 1, 0, tag_option_cb
};

static const char *context_name(void)
{
	switch (spank_context()) {
	case S_CTX_LOCAL: return "local";
	case S_CTX_REMOTE: return "remote";
	case S_CTX_ALLOCATOR: return "allocator";
	case S_CTX_SLURMD: return "slurmd";
	case S_CTX_JOB_SCRIPT: return "job_script";
	default: return "unknown";
	}
}

/* The job id: from the handle where Slurm offers it, else from the environment
 * (srun inside an allocation has SLURM_JOB_ID), else "-". */
static void job_id_text(spank_t sp, char *buf, size_t len)
{
	uint32_t job_id = 0;
	const char *env;

	if (spank_context() == S_CTX_REMOTE &&
	    spank_get_item(sp, S_JOB_ID, &job_id) == ESPANK_SUCCESS && job_id) {
		snprintf(buf, len, "%u", job_id);
		return;
	}
	env = getenv("SLURM_JOB_ID");
	snprintf(buf, len, "%s", (env && *env) ? env : "-");
}

static void log_line(spank_t sp, const char *callback)
{
	char job[32], line[1400];
	int fd, n;

	if (log_path[0] == '\0')
		return;
	job_id_text(sp, job, sizeof(job));
	n = snprintf(line, sizeof(line), "%s %s %s %s\n", context_name(), callback,
		     tag_value[0] ? tag_value : "-", job);
	if (n <= 0 || (size_t) n >= sizeof(line))
		return;
	/* the test creates the file 0666; creating it here is the fallback */
	fd = open(log_path, O_WRONLY | O_APPEND);
	if (fd < 0 && errno == ENOENT) {
		fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0666);
		if (fd >= 0)
			(void) fchmod(fd, 0666);
	}
	if (fd < 0)
		return;
	(void) write(fd, line, (size_t) n);
	close(fd);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	int i;

	for (i = 0; i < ac; i++) {
		if (strncmp(av[i], "log=", 4) == 0)
			snprintf(log_path, sizeof(log_path), "%s", av[i] + 4);
	}
	if (spank_option_register(sp, &tag_option) != ESPANK_SUCCESS) {
		slurm_error("scrun_tag: cannot register --scrun-tag");
		return -1;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	log_line(sp, "init_post_opt");
	if (tag_value[0] && spank_context() == S_CTX_ALLOCATOR &&
	    spank_job_control_setenv(sp, "SCRUN_TAG", tag_value, 1) != ESPANK_SUCCESS)
		slurm_error("scrun_tag: cannot set SCRUN_TAG in the job control environment");
	return 0;
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	log_line(sp, "local_user_init");
	return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	log_line(sp, "user_init");
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	log_line(sp, "task_init");
	if (tag_value[0] && spank_setenv(sp, "SCRUN_TAG", tag_value, 1) != ESPANK_SUCCESS)
		slurm_error("scrun_tag: cannot set SCRUN_TAG in the task environment");
	return 0;
}
